"""Messages that decode but should not be served, and messages too big to be read: a clear status for the caller
(RESOURCE_EXHAUSTED, INVALID_ARGUMENT), nothing done in the sandbox, and the server serving the next call. (Bytes that
are no message at all: ``test_grpc_junk``.)"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio

from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.limits import MAX_MESSAGE_BYTES
from tests.unit.conftest import ALPHA_TOKEN

AUTH = (("authorization", f"Bearer {ALPHA_TOKEN}"),)
SERVICE = pb.DESCRIPTOR.services_by_name["SandboxService"].full_name
BIG = [("grpc.max_send_message_length", 2 * MAX_MESSAGE_BYTES)]


@pytest_asyncio.fixture
async def sandbox(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    async with await alpha.create("terminal", labels={"test": "grpc-hostile"}) as sb:
        yield sb


async def test_a_message_over_the_limit_is_resource_exhausted_and_the_server_lives_on(
    target: str, sandbox: AsyncSandbox
) -> None:
    request = pb.WriteFileRequest(sandbox_id=sandbox.id, path="big", data=b"\0" * (MAX_MESSAGE_BYTES + 1))
    async with grpc.aio.insecure_channel(target, options=BIG) as channel:
        call = channel.unary_unary(f"/{SERVICE}/WriteFile")
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call(request.SerializeToString(), metadata=AUTH, timeout=60)
        assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details()
    del request
    assert (await sandbox.exec("ls -A /workspace")).stdout == "", "nothing of the refused message was written"
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"


@pytest.mark.parametrize(
    ("method", "request_", "match"),
    [
        ("Exec", lambda sid: pb.ExecRequest(sandbox_id=sid, exec=pb.Exec(shell="true", timeout=math.nan)), "timeout"),
        ("Exec", lambda sid: pb.ExecRequest(sandbox_id=sid, exec=pb.Exec(shell="true", timeout=-5)), "timeout"),
        ("Exec", lambda sid: pb.ExecRequest(sandbox_id=sid, exec=pb.Exec(shell="true", timeout=1e12)), "timeout"),
        ("Exec", lambda sid: pb.ExecRequest(sandbox_id=sid, exec=pb.Exec()), "cmd"),
        ("Step", lambda sid: pb.StepRequest(sandbox_id=sid), "action"),
        ("ReadFile", lambda sid: pb.ReadFileRequest(sandbox_id=sid, path="a\0b"), "NUL"),
        ("ReadFile", lambda sid: pb.ReadFileRequest(sandbox_id=sid, path="../etc/passwd"), "traversal"),
        ("ReadFile", lambda sid: pb.ReadFileRequest(sandbox_id=sid, path="x", offset=-1), "negative"),
        ("GetSandbox", lambda sid: pb.GetSandboxRequest(sandbox_id="x" * 100_000), ""),
        ("PreviewUrl", lambda sid: pb.PreviewUrlRequest(sandbox_id=sid), "port"),
        ("PreviewUrl", lambda sid: pb.PreviewUrlRequest(sandbox_id=sid, port=-(2**31)), "port"),
        ("PreviewUrl", lambda sid: pb.PreviewUrlRequest(sandbox_id=sid, port=8000, ttl_s=math.inf), "ttl_s"),
        ("PreviewUrl", lambda sid: pb.PreviewUrlRequest(sandbox_id="x" * 100_000, port=8000), ""),
    ],
    ids=[
        "nan-timeout",
        "negative-timeout",
        "huge-timeout",
        "no-command",
        "no-action",
        "nul-path",
        "dotdot-path",
        "negative-offset",
        "huge-id",
        "preview-no-port",
        "preview-negative-port",
        "preview-infinite-ttl",
        "preview-huge-id",
    ],
)
async def test_decodable_but_invalid_requests_get_a_clear_status(
    target: str, sandbox: AsyncSandbox, method: str, request_: object, match: str
) -> None:
    message = request_(sandbox.id)  # type: ignore[operator]
    async with grpc.aio.insecure_channel(target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.unary_unary(f"/{SERVICE}/{method}")(message.SerializeToString(), metadata=AUTH, timeout=30)
    code, details = refused.value.code(), str(refused.value.details())
    assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND), (
        code,
        details,
    )
    assert match in details and "Traceback" not in details, details
    assert (await sandbox.exec("echo alive")).stdout == "alive\n"
