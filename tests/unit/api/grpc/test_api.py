"""The gRPC skin and the SDK, end to end: a real ``grpc.aio`` server on 127.0.0.1 over a service
on the fake backend (real agents as local subprocesses, terminal sandboxes only), driven
through ``sandbox.client``. The blocking client runs in a worker thread so that the server,
which lives in the test's event loop, can answer it."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio

from sandbox.api.grpc.server import bind_grpc_server, start_grpc_server
from sandbox.api.grpc.step_streams import StepStreams
from sandbox.client import AsyncClient, AsyncSandbox, Client, _ops
from sandbox.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, Unauthenticated
from sandbox.gym import SandboxEnv
from sandbox.models import Action, Exec, Observation, SandboxKind, SandboxState
from sandbox.service import SandboxService, TokenRegistry
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc
from tests.unit.conftest import ADMIN_TOKEN, ALPHA_TOKEN, BETA_TOKEN, LOGGER, TOKENS

ALPHA, BETA, ADMIN = ALPHA_TOKEN, BETA_TOKEN, ADMIN_TOKEN


@pytest_asyncio.fixture
async def sandbox(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    """A terminal sandbox of tenant alpha, deleted afterwards."""
    async with await alpha.create("terminal", labels={"test": "grpc"}) as sb:
        yield sb


@pytest_asyncio.fixture
async def raw(target: str) -> AsyncIterator[Any]:
    """The generated stub itself, to send what the SDK would refuse to."""
    async with grpc.aio.insecure_channel(target) as channel:
        yield pb_grpc.SandboxServiceStub(channel)


AUTH_ALPHA = (("authorization", f"Bearer {ALPHA}"),)


# --------------------------------------------------------------------------- lifecycle and acting


async def test_create_exec_step_reset_list_delete(alpha: AsyncClient, admin: AsyncClient) -> None:
    sb = await alpha.create("terminal", labels={"test": "grpc"}, env={"GREETING": "hi"})
    try:
        assert sb.info.kind is SandboxKind.TERMINAL
        assert sb.info.state is SandboxState.RUNNING
        assert sb.info.tenant == "alpha"
        assert sb.info.spec.labels == {"test": "grpc"}

        result = await sb.exec("echo $GREETING; echo oops >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "oops\n")
        assert (await sb.exec(["printf", "%s", "a b"])).stdout == "a b"
        await sb.exec("cd /tmp && X=7", session="s1")
        assert (await sb.exec("echo $X $PWD", session="s1")).stdout == "7 /tmp\n"
        slow = await sb.exec("sleep 5", timeout=0.3)
        assert slow.timed_out and not slow.ok

        obs = await sb.step({"type": "exec", "cmd": "echo stepped"})
        assert isinstance(obs, Observation)
        assert obs.exec is not None and obs.exec.stdout == "stepped\n"
        assert "total" in obs.timings_ms
        obs = await sb.step(Exec(cmd=["sh", "-c", "echo model"]))
        assert obs.exec is not None and obs.exec.stdout == "model\n"

        assert sb.id in {i.id for i in await alpha.list()}
        assert (await alpha.get(sb.id)).info.id == sb.id
        assert sb.id in {i.id for i in await admin.list()}

        await sb.files.write("before-reset.txt", "x")
        info = await sb.reset()
        assert info.state is SandboxState.RUNNING and sb.info is info
        assert "before-reset.txt" not in {f.name for f in await sb.files.list(".")}
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        assert (await sb.health()).ok
        assert isinstance(await sb.logs(tail=10), str)
        assert (await sb.observe()).screenshot is None  # a terminal has no screen
    finally:
        await sb.close()
    await sb.close()  # idempotent
    with pytest.raises(NotFound):
        await alpha.get(sb.id)
    assert sb.id not in {i.id for i in await alpha.list()}


async def test_files(sandbox: AsyncSandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await sandbox.files.write("dir/a.txt", "héllo") == len("héllo".encode())
    assert await sandbox.files.read("dir/a.txt") == "héllo".encode()
    assert await sandbox.files.write("dir/a.txt", b"!", append=True) == 7
    assert await sandbox.files.read("dir/a.txt", offset=1, length=3) == "él".encode()
    listing = {f.name: f for f in await sandbox.files.list("dir")}
    assert listing["a.txt"].type == "file" and listing["a.txt"].size == 7
    await sandbox.files.delete("dir", recursive=True)
    assert "dir" not in {f.name for f in await sandbox.files.list(".")}
    with pytest.raises(NotFound):
        await sandbox.files.read("dir/a.txt")

    # Pieces smaller than the data: every chunked path (read, write, upload, download) loops.
    monkeypatch.setattr(_ops, "CHUNK_BYTES", 7)
    payload = bytes(range(256)) * 3
    (tmp_path / "up.bin").write_bytes(payload)
    assert await sandbox.files.upload(tmp_path / "up.bin", "up.bin") == len(payload)
    assert await sandbox.files.read("up.bin") == payload
    assert await sandbox.files.download("up.bin", tmp_path / "down.bin") == len(payload)
    assert (tmp_path / "down.bin").read_bytes() == payload
    assert await sandbox.files.write("w.bin", payload) == len(payload)
    assert await sandbox.files.read("w.bin", offset=5, length=100) == payload[5:105]
    (tmp_path / "empty").write_bytes(b"")
    assert await sandbox.files.upload(tmp_path / "empty", "empty") == 0
    assert await sandbox.files.read("empty") == b""


async def test_large_file_crosses_the_message_limit_in_pieces(sandbox: AsyncSandbox) -> None:
    data = os.urandom(_ops.CHUNK_BYTES + 1024)
    assert await sandbox.files.write("big.bin", data) == len(data)
    assert await sandbox.files.read("big.bin") == data


async def test_step_stream(sandbox: AsyncSandbox) -> None:
    async with sandbox.step_stream() as stream:
        for i in range(5):
            obs = await stream.step({"type": "exec", "cmd": f"echo {i}"})
            assert obs.exec is not None and obs.exec.stdout == f"{i}\n"
        with pytest.raises(FailedPrecondition, match="no display"):  # fails on the server, in the stream
            await stream.step({"type": "click", "x": 1, "y": 1})
        with pytest.raises(InvalidArgument, match=r"click\.x"):  # fails in the SDK, before sending
            await stream.step({"type": "click", "x": -1})
        obs = await stream.step({"type": "exec", "cmd": "echo still here"})
        assert obs.exec is not None and obs.exec.stdout == "still here\n"


async def test_observe_goes_over_a_step_stream(sandbox: AsyncSandbox, raw: Any) -> None:
    async with sandbox.step_stream() as stream:
        obs = await stream.observe()
        assert obs.screenshot is None and obs.exec is None  # a terminal has no screen, and nothing ran
        assert (await stream.step({"type": "exec", "cmd": "echo after"})).exec.stdout == "after\n"  # type: ignore[union-attr]
    assert sandbox._steps._call is None
    assert (await sandbox.observe()).screenshot is None
    assert sandbox._steps._call is not None, "the handle's observe went as a call of its own"

    both = pb.StepRequest(
        sandbox_id=sandbox.id, action=pb.Action(exec=pb.Exec(shell="echo no")), observe=pb.ObserveOptions()
    )
    observing = pb.StepRequest(sandbox_id=sandbox.id, observe=pb.ObserveOptions(format="png"))
    replies = [r async for r in raw.StepStream(iter([both, observing]), metadata=AUTH_ALPHA)]
    assert [r.WhichOneof("result") for r in replies] == ["error", "observation"]
    assert replies[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "either acts or observes" in replies[0].error.message
    assert not replies[1].observation.HasField("exec")


async def test_an_observe_made_while_a_step_is_in_flight_does_not_wait_for_it(sandbox: AsyncSandbox) -> None:
    finished: list[str] = []

    async def slow_step() -> None:
        await sandbox.step({"type": "exec", "cmd": "sleep 0.4"})
        finished.append("step")

    async def observe() -> None:
        await asyncio.sleep(0.1)  # the step is on the handle's stream by now
        await sandbox.observe()
        finished.append("observe")

    await asyncio.gather(slow_step(), observe())
    assert finished == ["observe", "step"]


async def test_a_step_given_up_midway_does_not_shift_the_stream_s_later_replies(sandbox: AsyncSandbox) -> None:
    async with sandbox.step_stream() as stream:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(stream.step({"type": "exec", "cmd": "sleep 0.5; echo late"}), 0.1)
        for word in ("next", "and the next"):
            obs = await stream.step({"type": "exec", "cmd": f"echo {word}"})
            assert obs.exec is not None and obs.exec.stdout == f"{word}\n"


async def test_a_handle_s_steps_given_up_midway_or_made_at_once_each_get_their_own_reply(sandbox: AsyncSandbox) -> None:
    with pytest.raises(TimeoutError):  # given up on the handle's own stream
        await asyncio.wait_for(sandbox.step({"type": "exec", "cmd": "sleep 0.5; echo late"}), 0.1)
    assert (await sandbox.step({"type": "exec", "cmd": "echo next"})).exec.stdout == "next\n"  # type: ignore[union-attr]
    finished: list[str] = []

    async def step(cmd: str, name: str) -> Observation:
        obs = await sandbox.step({"type": "exec", "cmd": cmd})
        finished.append(name)
        return obs

    slow, quick = await asyncio.gather(
        step("sleep 0.4; echo slow", "slow"),
        step("echo quick", "quick"),  # the handle's stream is busy: this one goes as a call of its own
    )
    assert slow.exec is not None and slow.exec.stdout == "slow\n"
    assert quick.exec is not None and quick.exec.stdout == "quick\n"
    assert finished == ["quick", "slow"], "the two ran side by side, not one after the other"


async def test_a_step_on_the_handle_s_stream_waits_no_longer_than_its_deadline(sandbox: AsyncSandbox) -> None:
    # The deadline a unary Step would get (the client's timeout, or the action's own budget if longer).
    slow = _ops.step_request(sandbox.id, {"type": "exec", "cmd": "sleep 1.5"}, screenshot=False)
    with pytest.raises(DeadlineExceeded, match=r"within 0\.2 s"):
        await sandbox._steps._exchange(slow, 0.2)
    assert (await sandbox.step({"type": "exec", "cmd": "echo after"})).exec.stdout == "after\n"  # type: ignore[union-attr]


async def test_a_stopping_server_ends_idle_step_streams_and_the_sdk_opens_new_ones(
    service: SandboxService, sandbox: AsyncSandbox
) -> None:
    streams = StepStreams()
    tokens = TokenRegistry.from_mapping(TOKENS)
    server, port = await bind_grpc_server(
        service, tokens, host="127.0.0.1", port=0, logger=LOGGER, step_streams=streams
    )
    async with AsyncClient(f"127.0.0.1:{port}", token=ALPHA) as client:
        handle = AsyncSandbox(client, sandbox.info)
        assert (await handle.step({"type": "exec", "cmd": "echo one"})).exec.stdout == "one\n"  # type: ignore[union-attr]
        started = asyncio.get_running_loop().time()
        streams.end()
        await server.stop(grace=30)  # the handle's stream is open and idle: it must not hold the stop
        assert asyncio.get_running_loop().time() - started < 10
        server, _ = await bind_grpc_server(service, tokens, host="127.0.0.1", port=port, logger=LOGGER)
        try:
            assert (await handle.step({"type": "exec", "cmd": "echo two"})).exec.stdout == "two\n"  # type: ignore[union-attr]
        finally:
            await server.stop(None)


async def test_step_stream_with_a_bad_token_is_unauthenticated(target: str, sandbox: AsyncSandbox) -> None:
    async with AsyncClient(target, token="not-a-valid-token-at-all") as client:
        handle = AsyncSandbox(client, sandbox.info)
        async with handle.step_stream() as stream:
            with pytest.raises(Unauthenticated):
                await stream.step({"type": "exec", "cmd": "true"})


# --------------------------------------------------------------------------- bad input


async def test_bad_actions_fail_fast_in_the_sdk_naming_the_field(alpha: AsyncClient, sandbox: AsyncSandbox) -> None:
    with pytest.raises(InvalidArgument, match=r"type: Input tag 'teleport'"):
        await sandbox.step({"type": "teleport", "x": 1})
    with pytest.raises(InvalidArgument, match=r"click\.x: Input should be greater than or equal to 0"):
        await sandbox.step({"type": "click", "x": -5, "y": 1})
    with pytest.raises(InvalidArgument, match=r"exec\.cmd: Field required"):
        await sandbox.step({"type": "exec"})
    with pytest.raises(InvalidArgument, match=r"timeout"):
        await sandbox.exec("true", timeout=-1)
    with pytest.raises(InvalidArgument, match=r"resources\.cpus"):
        await alpha.create("terminal", resources={"cpus": 0})
    with pytest.raises(InvalidArgument, match=r"kind"):
        await alpha.create("mainframe")


async def test_bad_requests_are_invalid_argument_on_the_server(raw: Any, sandbox: AsyncSandbox) -> None:
    cases: list[tuple[str, Any, str]] = [
        ("Step", pb.StepRequest(sandbox_id=sandbox.id, action=pb.Action()), "no action is set"),
        ("Step", pb.StepRequest(sandbox_id=sandbox.id, action=pb.Action(click=pb.Click(x=-1))), "click.x"),
        ("Step", pb.StepRequest(sandbox_id=sandbox.id, action=pb.Action(move=pb.Move(x=3))), "move.y: Field required"),
        ("Step", pb.StepRequest(sandbox_id=sandbox.id, action=pb.Action(exec=pb.Exec())), "exec.cmd: Field required"),
        ("Exec", pb.ExecRequest(sandbox_id=sandbox.id, exec=pb.Exec(shell="true", timeout=0)), "timeout"),
        ("CreateSandbox", pb.CreateSandboxRequest(), "kind: Field required"),
        ("CreateSandbox", pb.CreateSandboxRequest(spec=pb.SandboxSpec(kind=99)), "kind: Input should be"),
        (
            "CreateSandbox",
            pb.CreateSandboxRequest(
                spec=pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, volumes=[pb.VolumeMount(name="v", path="rel")])
            ),
            "volumes.0.path",
        ),
    ]
    for method, request, needle in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await getattr(raw, method)(request, metadata=AUTH_ALPHA)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, (method, caught.value.details())
        assert needle in (caught.value.details() or ""), (method, caught.value.details())


async def test_unexpected_errors_are_internal_and_logged(
    raw: Any, service: SandboxService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "list_sandboxes", broken)
    with caplog.at_level(logging.ERROR, logger=LOGGER.name), pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.ListSandboxes(pb.ListSandboxesRequest(), metadata=AUTH_ALPHA)
    assert caught.value.code() is grpc.StatusCode.INTERNAL
    assert "a bug" not in (caught.value.details() or "")  # internals stay in the log
    [record] = [r for r in caplog.records if "ListSandboxes" in r.getMessage()]
    assert record.exc_info is not None and "a bug" in str(record.exc_info[1])


# --------------------------------------------------------------------------- not found, tenants, auth


async def test_unknown_sandbox_is_not_found(alpha: AsyncClient, sandbox: AsyncSandbox) -> None:
    with pytest.raises(NotFound, match="no-such-sandbox"):
        await alpha.get("no-such-sandbox")
    ghost = AsyncSandbox(alpha, sandbox.info.model_copy(update={"id": "term-000000000000"}))
    with pytest.raises(NotFound):
        await ghost.exec("true")
    with pytest.raises(NotFound):
        await ghost.step({"type": "exec", "cmd": "true"})
    with pytest.raises(NotFound):
        await ghost.files.read("x")


async def test_another_tenants_sandbox_is_not_found(
    beta: AsyncClient, admin: AsyncClient, sandbox: AsyncSandbox
) -> None:
    with pytest.raises(NotFound):
        await beta.get(sandbox.id)
    assert sandbox.id not in {i.id for i in await beta.list()}
    theirs = AsyncSandbox(beta, sandbox.info)
    attempts: list[Callable[[], Awaitable[Any]]] = [
        lambda: theirs.exec("true"),
        lambda: theirs.step({"type": "exec", "cmd": "true"}),
        lambda: theirs.files.write("x", "y"),
        lambda: theirs.reset(),
        lambda: theirs.health(),
    ]
    for attempt in attempts:
        with pytest.raises(NotFound):
            await attempt()
    with pytest.raises(NotFound):
        await beta._run(_ops.delete(sandbox.id))
    assert (await admin.get(sandbox.id)).id == sandbox.id  # the admin sees every tenant
    assert (await sandbox.exec("echo mine")).stdout == "mine\n"  # and it is untouched


async def test_missing_or_bad_token_is_unauthenticated(target: str, raw: Any) -> None:
    for token in (None, "wrong-token-0123456789"):
        async with AsyncClient(target, token=token) as client:
            with pytest.raises(Unauthenticated):
                await client.list()
            with pytest.raises(Unauthenticated):
                await client.create("terminal")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.ListSandboxes(pb.ListSandboxesRequest(), metadata=(("authorization", f"Basic {ALPHA}"),))
    assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED


# --------------------------------------------------------------------------- the blocking client and the env


def _sync_session(target: str, tmp: Path) -> None:
    with Client(target, token=ALPHA, timeout=60) as client:
        with client.create(kind="terminal") as sb:
            assert sb.exec("echo sync").stdout == "sync\n"
            obs = sb.step({"type": "exec", "cmd": "echo $((1+2))"})
            assert obs.exec is not None and obs.exec.stdout == "3\n"
            assert sb.files.write("s.txt", "sync file") == 9
            assert sb.files.read("s.txt") == b"sync file"
            assert "s.txt" in {f.name for f in sb.files.list(".")}
            assert sb.files.download("s.txt", tmp / "s.txt") == 9
            sb.files.delete("s.txt")
            with pytest.raises(InvalidArgument, match="type"):
                sb.step({"type": "nope"})
            with sb.step_stream() as stream:
                for i in range(3):
                    obs = stream.step({"type": "exec", "cmd": f"echo {i}"})
                    assert obs.exec is not None and obs.exec.stdout == f"{i}\n"
                with pytest.raises(FailedPrecondition):
                    stream.step({"type": "key", "key": "Return"})
                observed = stream.observe()  # on the stream, as a step whose `observe` is set
                assert observed.screenshot is None and observed.exec is None
                assert stream.step(Exec(cmd="echo ok")).exec is not None
            assert sb.id in {i.id for i in client.list()}
            assert client.get(sb.id).info.id == sb.id
            sandbox_id = sb.id
        with pytest.raises(NotFound):
            client.get(sandbox_id)
    assert (tmp / "s.txt").read_text() == "sync file"
    with Client(target) as anonymous, pytest.raises(Unauthenticated):
        anonymous.list()


async def test_sync_client(target: str, tmp_path: Path) -> None:
    await asyncio.to_thread(_sync_session, target, tmp_path)


def _episode(target: str) -> list[tuple[float, bool, bool]]:
    def reward(sb: Any, action: Action, obs: Observation) -> float:
        return 1.0 if obs.exec is not None and obs.exec.stdout.strip() == "3" else 0.0

    outcomes = []
    with Client(target, token=ALPHA, timeout=60) as client:
        env = SandboxEnv("terminal", client=client, spec={"labels": {"test": "gym"}}, reward_fn=reward, max_steps=3)
        try:
            obs, info = env.reset(seed=0)
            assert obs == {"text": ""} and info["sandbox_id"]
            first_id = info["sandbox_id"]
            for cmd in ("touch mark; echo 1", "echo $((1+2))", "echo done"):
                obs, r, terminated, truncated, step_info = env.step({"type": "exec", "cmd": cmd})
                outcomes.append((r, terminated, truncated))
                assert step_info["sandbox_id"] == first_id
            _, info = env.reset()  # the same sandbox, reset: the mark is gone
            assert info["sandbox_id"] == first_id
            obs, *_ = env.step({"type": "exec", "cmd": "test -e mark; echo $?"})
            assert obs["text"] == "1\n"
        finally:
            env.close()
        with pytest.raises(NotFound):
            client.get(first_id)
        with pytest.raises(FailedPrecondition):
            env.step({"type": "exec", "cmd": "true"})
    return outcomes


async def test_gym_env_runs_an_episode(target: str) -> None:
    outcomes = await asyncio.to_thread(_episode, target)
    assert outcomes == [(0.0, False, False), (1.0, False, False), (0.0, False, True)]


# --------------------------------------------------------------------------- the server itself


async def test_a_taken_port_is_a_clear_error(service: SandboxService) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgument, match=f"127.0.0.1:{port}"):
            await start_grpc_server(service, TokenRegistry({}), host="127.0.0.1", port=port, logger=LOGGER)


async def test_anonymous_mode_when_no_tokens(service: SandboxService) -> None:
    server, port = await bind_grpc_server(service, TokenRegistry({}), host="127.0.0.1", port=0, logger=LOGGER)
    try:
        async with AsyncClient(f"127.0.0.1:{port}") as client:
            assert isinstance(await client.list(), list)
    finally:
        await server.stop(None)
