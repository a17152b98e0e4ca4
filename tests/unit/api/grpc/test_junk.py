"""Bytes that are no protobuf message, sent to every method: the caller's error (INVALID_ARGUMENT), the server
keeps serving, and the log gets one short warning, never an ERROR with a traceback per request."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio

from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from tests.unit.conftest import ALPHA_TOKEN

AUTH = (("authorization", f"Bearer {ALPHA_TOKEN}"),)
SERVICE = pb.DESCRIPTOR.services_by_name["SandboxService"]
# Field 1 with wire type 7, which does not exist: whatever follows, no message parses from this.
CORRUPT_TAG = b"\x0f"


@pytest_asyncio.fixture
async def sandbox(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    async with await alpha.create("terminal", labels={"test": "grpc-junk"}) as sb:
        yield sb


def _junk(rng: random.Random) -> bytes:
    return CORRUPT_TAG + rng.randbytes(rng.randrange(0, 48))


async def test_undecodable_requests_are_invalid_argument_and_logged_once(
    target: str, sandbox: AsyncSandbox, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(20261123)
    unary = [m.name for m in SERVICE.methods if not m.client_streaming and not m.server_streaming]
    assert len(unary) >= 16
    caplog.set_level(logging.WARNING)
    async with grpc.aio.insecure_channel(target) as channel:
        for name in unary:
            call = channel.unary_unary(f"/{SERVICE.full_name}/{name}")  # bytes in, bytes out
            for _ in range(5):
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await call(_junk(rng), metadata=AUTH, timeout=10)
                assert failed.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (name, failed.value.details())
                assert "is not a valid sandbox.v1." in str(failed.value.details())

        stream = channel.stream_stream(f"/{SERVICE.full_name}/StepStream")(metadata=AUTH, timeout=10)
        await stream.write(_junk(rng))
        answer = pb.StepResponse.FromString(await stream.read())
        assert answer.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], answer
        good = pb.StepRequest(sandbox_id=sandbox.id)
        good.action.exec.shell = "echo still serving"  # the stream goes on after the junk
        await stream.write(good.SerializeToString())
        answer = pb.StepResponse.FromString(await stream.read())
        assert answer.observation.exec.stdout == "still serving\n", answer
        await stream.done_writing()

    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    warned = [r for r in caplog.records if "was refused" in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in warned]
    assert all(r.exc_info is None for r in caplog.records)
