"""Steps in many sandboxes in one call (``step_many``, gRPC ``StepMany``, REST ``POST /v1/sandboxes:step``), on the
fake backend: each step runs in its own sandbox, all at once, and is answered in order by its observation or its
error, one sandbox's failure failing no other; a malformed batch is refused before any step is done."""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import pytest
import pytest_asyncio

from sandbox.api.grpc import batches as grpc_batches
from sandbox.client import AsyncClient, AsyncSandbox, Client
from sandbox.errors import InvalidArgument, NotFound, ResourceExhausted
from sandbox.models import Observation
from sandbox.models.step_batch import STEP_BATCH_MAX
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc
from tests.unit.conftest import ALPHA, ALPHA_TOKEN

MISSING = "sb-term-000000000000"


@pytest_asyncio.fixture(scope="module")
async def trio(alpha: AsyncClient) -> AsyncIterator[list[AsyncSandbox]]:
    group = await alpha.create_group(3, "terminal", labels={"t": "batch"})
    yield group
    for sb in group:
        await sb.close()


def _stdout(outcome: object) -> str:
    assert isinstance(outcome, Observation), outcome
    assert outcome.exec is not None
    return outcome.exec.stdout


async def test_each_step_runs_in_its_own_sandbox_answered_in_order(
    alpha: AsyncClient, trio: list[AsyncSandbox]
) -> None:
    homes = [(await sb.exec("pwd")).stdout for sb in trio]  # each fake sandbox's own working directory
    assert len(set(homes)) == 3
    outcomes = await alpha.step_many([(sb, {"type": "exec", "cmd": "pwd"}) for sb in reversed(trio)])
    assert [_stdout(o) for o in outcomes] == homes[::-1]


async def test_the_steps_run_at_once(alpha: AsyncClient, trio: list[AsyncSandbox], tmp_path: Path) -> None:
    # Each step waits for the other's mark before making its own: done one after the other, the first would wait
    # out its timeout and fail.
    first, second = (shlex.quote(str(tmp_path / name)) for name in ("first", "second"))
    waits = "for i in $(seq 200); do [ -e {} ] && break; sleep 0.05; done; test -e {} && touch {}"
    steps = [
        (trio[0], {"type": "exec", "cmd": f"touch {first}; " + waits.format(second, second, first + ".seen")}),
        (trio[1], {"type": "exec", "cmd": f"touch {second}; " + waits.format(first, first, second + ".seen")}),
    ]
    outcomes = await alpha.step_many(steps)
    for outcome in outcomes:
        assert isinstance(outcome, Observation) and outcome.exec is not None
        assert outcome.exec.exit_code == 0, outcome.exec
    assert (tmp_path / "first.seen").exists() and (tmp_path / "second.seen").exists()


async def test_a_failing_step_fails_no_other(alpha: AsyncClient, trio: list[AsyncSandbox]) -> None:
    outcomes = await alpha.step_many(
        [
            (trio[0], {"type": "exec", "cmd": "echo before"}),
            (MISSING, {"type": "exec", "cmd": "echo never"}),
            (trio[1], {"type": "click", "x": 1, "y": 1}),  # a terminal has no screen
            (trio[2].id, {"type": "exec", "cmd": "echo after"}),
        ]
    )
    assert _stdout(outcomes[0]) == "before\n"
    assert isinstance(outcomes[1], NotFound), outcomes[1]
    assert MISSING in outcomes[1].message
    assert not isinstance(outcomes[2], Observation) and outcomes[2].code == "failed_precondition", outcomes[2]
    assert _stdout(outcomes[3]) == "after\n"


async def test_an_empty_batch_does_nothing(alpha: AsyncClient) -> None:
    assert await alpha.step_many([]) == []


async def test_the_sdk_refuses_a_malformed_batch_before_any_call(alpha: AsyncClient, trio: list[AsyncSandbox]) -> None:
    marker = "must-not-exist"  # in the sandbox's working directory
    write = {"type": "exec", "cmd": f"touch {marker}"}
    with pytest.raises(InvalidArgument, match=r"steps\[1\]: sandbox .* already has steps\[0\]"):
        await alpha.step_many([(trio[0], write), (trio[0].id, write)])
    with pytest.raises(InvalidArgument, match=r"steps\[1\]: .*x"):
        await alpha.step_many([(trio[0], write), (trio[1], {"type": "click", "x": -5, "y": 1})])
    with pytest.raises(InvalidArgument, match="at most 1024 steps"):
        await alpha.step_many([(f"sbx-{i:016x}", write) for i in range(STEP_BATCH_MAX + 1)])
    for sb in trio:
        assert (await sb.exec(f"test -e {marker}")).exit_code == 1, "a refused batch did a step"


def _batch(*steps: pb.StepRequest) -> pb.StepManyRequest:
    return pb.StepManyRequest(steps=list(steps))


def _exec_step(sandbox_id: str) -> pb.StepRequest:
    action = convert.action_to_proto(convert.validate_action({"type": "exec", "cmd": "true"}))
    return pb.StepRequest(sandbox_id=sandbox_id, action=action)


async def test_the_server_refuses_a_malformed_batch(target: str, trio: list[AsyncSandbox]) -> None:
    one = trio[0].id
    observe = pb.StepRequest(sandbox_id=trio[1].id, observe=pb.ObserveOptions())
    cases = [
        (_batch(_exec_step(one), _exec_step(one)), r"steps\[1\]: sandbox .* already has steps\[0\]"),
        (_batch(_exec_step(one), observe), r"steps\[1\]: a batched step needs an action"),
        (_batch(pb.StepRequest(sandbox_id=one)), r"steps\[0\]: a batched step needs an action"),
        (_batch(_exec_step("")), r"steps\[0\]: no sandbox_id"),
        (_batch(*(_exec_step(f"sbx-{i:016x}") for i in range(STEP_BATCH_MAX + 1))), "at most 1024 steps"),
    ]
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SandboxServiceStub(channel)
        for request, message in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.StepMany(request, metadata=(("authorization", f"Bearer {ALPHA_TOKEN}"),))
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert re.search(message, refused.value.details() or ""), refused.value.details()


async def test_a_step_of_another_callers_sandbox_is_not_found(beta: AsyncClient, trio: list[AsyncSandbox]) -> None:
    (outcome,) = await beta.step_many([(trio[0].id, "true")])
    assert isinstance(outcome, NotFound), outcome


async def test_the_sync_client_steps_a_batch(target: str, trio: list[AsyncSandbox]) -> None:
    def run() -> list[Observation | Exception]:
        with Client(target, token=ALPHA_TOKEN) as client:
            return list(client.step_many([(sb.id, {"type": "exec", "cmd": "echo sync"}) for sb in trio]))

    outcomes = await asyncio.to_thread(run)
    assert [_stdout(o) for o in outcomes] == ["sync\n"] * 3


async def test_rest_steps_a_batch_and_refuses_a_malformed_one(api: httpx.AsyncClient, trio: list[AsyncSandbox]) -> None:
    exec_ = {"type": "exec", "cmd": "echo rest"}
    body = {"steps": [{"sandbox_id": trio[0].id, "action": exec_}, {"sandbox_id": MISSING, "action": exec_}]}
    answered = await api.post("/v1/sandboxes:step", json=body, headers=ALPHA)
    assert answered.status_code == 200, answered.text
    first, second = answered.json()["results"]
    assert first["observation"]["exec"]["stdout"] == "rest\n" and first["error"] is None
    assert second["observation"] is None and second["error"]["code"] == "not_found"

    twice = {"steps": [{"sandbox_id": trio[0].id, "action": exec_}] * 2}
    refused = await api.post("/v1/sandboxes:step", json=twice, headers=ALPHA)
    assert refused.status_code == 422, refused.text
    assert "already has steps[0]" in refused.json()["error"]["message"]


async def test_answers_too_large_for_one_message_are_refused_clearly(
    alpha: AsyncClient, trio: list[AsyncSandbox], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grpc_batches, "MAX_MESSAGE_BYTES", 4096)
    big = {"type": "exec", "cmd": "head -c 3000 /dev/zero | tr '\\0' x"}
    with pytest.raises(ResourceExhausted, match=r"come to 0\.0 MiB, over the 0 MiB a message holds; its steps were"):
        await alpha.step_many([(sb, big) for sb in trio])
    (fits,) = await alpha.step_many([(trio[0], big)])
    assert _stdout(fits) == "x" * 3000
