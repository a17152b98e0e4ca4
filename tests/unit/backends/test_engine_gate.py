"""The engine gate (``sandbox.backends.engine_gate``): calls bounded by kind and queued FIFO, fast failure when the
engine stalls or a slot does not come, overload judged with hysteresis, and cancelled callers that free nothing
wrongly. A fake clock and a fake engine whose every call is a future the test answers: no sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.docker.engine_client import NO_ANSWER
from sandbox.backends.engine_gate import CallKind, EngineCallSettings, EngineGate
from sandbox.errors import Unavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Engine:
    """Each call waits for the test to answer it; ``calls`` lists them in the order they reached the engine."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.pending: dict[str, asyncio.Future[str]] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}

    def call(self, name: str) -> Callable[[], Awaitable[str]]:
        async def reach() -> str:
            self.calls.append(name)
            self.pending[name] = asyncio.get_running_loop().create_future()
            task = asyncio.current_task()
            assert task is not None
            self.tasks[name] = task
            return await self.pending[name]

        return reach

    def answer(self, name: str, error: BaseException | None = None) -> None:
        future = self.pending.pop(name)
        if error is None:
            future.set_result(f"{name} done")
        else:
            future.set_exception(error)


async def settle() -> None:
    """Let every task that can run, run (no time passes)."""
    for _ in range(20):
        await asyncio.sleep(0)


def gate_of(clock: Clock, **settings: Any) -> EngineGate:
    return EngineGate(EngineCallSettings.model_validate(settings), clock=clock)


def start(gate: EngineGate, engine: Engine, kind: CallKind, name: str, **kw: Any) -> asyncio.Task[str]:
    return asyncio.ensure_future(gate.run(kind, engine.call(name), **kw))


async def test_calls_are_bounded_per_kind_and_the_rest_wait() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"create": 2, "other": 3})
    creates = [start(gate, engine, "create", f"c{i}") for i in range(5)]
    others = [start(gate, engine, "other", f"o{i}") for i in range(3)]
    await settle()
    assert sorted(engine.calls) == ["c0", "c1", "o0", "o1", "o2"], "a kind's slots are its own"
    stats = gate.stats()
    assert stats.in_flight["create"] == 2 and stats.queued["create"] == 3
    assert stats.in_flight["other"] == 3 and stats.queued["other"] == 0
    engine.answer("c0")
    await settle()
    assert await creates[0] == "c0 done"
    assert engine.calls[-1] == "c2" and gate.stats().in_flight["create"] == 2
    for name in ("c1", "c2", "c3", "c4", "o0", "o1", "o2"):
        await settle()
        engine.answer(name)
    assert await asyncio.gather(*creates[1:], *others) == [f"{n} done" for n in ("c1", "c2", "c3", "c4")] + [
        f"o{i} done" for i in range(3)
    ]
    stats = gate.stats()
    assert stats.in_flight == dict.fromkeys(stats.in_flight, 0) and stats.peak_in_flight["create"] == 2


async def test_queued_calls_get_their_slot_in_the_order_they_came() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"remove": 1})
    tasks = [start(gate, engine, "remove", f"r{i}") for i in range(6)]
    for i in range(6):
        await settle()
        engine.answer(f"r{i}")
    await asyncio.gather(*tasks)
    assert engine.calls == [f"r{i}" for i in range(6)]


async def test_a_stalled_engine_fails_new_and_queued_calls_at_once_saying_why() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"create": 1}, stall_s=30)
    stuck = start(gate, engine, "create", "c0")
    queued = [start(gate, engine, "create", f"c{i}") for i in (1, 2)]
    await settle()
    clock.advance(29)
    assert gate.pressure() is None, "not yet stalled"
    clock.advance(2)
    with pytest.raises(Unavailable) as refused:
        await gate.run("other", engine.call("o0"))
    assert refused.value.message == "the engine has not answered for 31 s; 3 calls are waiting; retry later"
    for task in queued:
        with pytest.raises(Unavailable, match="the engine has not answered for 31 s"):
            await task
    assert engine.calls == ["c0"], "nothing more was sent to a stalled engine"
    assert gate.stats().queued["create"] == 0 and gate.stats().in_flight["create"] == 1
    engine.answer("c0")  # the engine comes back: calls go through again
    assert await stuck == "c0 done"
    task = start(gate, engine, "create", "c3")
    await settle()
    engine.answer("c3")
    assert await task == "c3 done"


async def test_queued_calls_fail_when_the_gates_timer_finds_the_engine_stalled() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"commit": 1}, stall_s=30)
    owing = start(gate, engine, "other", "o0")
    patient = start(gate, engine, "commit", "k0", patient=True)
    queued = start(gate, engine, "commit", "k1")
    await settle()
    clock.advance(30)
    gate.expire()  # what the gate's own timer does when it fires
    with pytest.raises(Unavailable, match=r"has not answered for 30 s; 3 calls are waiting; retry later"):
        await queued  # 2 in flight and itself
    engine.answer("o0")
    engine.answer("k0")
    assert await asyncio.gather(owing, patient) == ["o0 done", "k0 done"]


async def test_silence_counts_only_while_an_answer_is_owed() -> None:
    """A quiet engine is not a stalled one, and a patient call (a commit) may take long."""
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, stall_s=30)
    clock.advance(600)  # nothing asked for ten minutes
    first = start(gate, engine, "other", "o0")
    await settle()
    clock.advance(1)
    assert gate.stats().silence_s == 1 and gate.stats().since_answer_s == 601
    second = start(gate, engine, "other", "o1")  # not refused: owed for 1 s only
    await settle()
    engine.answer("o0")
    engine.answer("o1")
    await asyncio.gather(first, second)
    commit = start(gate, engine, "commit", "k0", patient=True)
    await settle()
    clock.advance(300)
    assert gate.stats().silence_s == 0 and gate.pressure() is None
    other = start(gate, engine, "other", "o2")
    await settle()
    engine.answer("o2")
    engine.answer("k0")
    await asyncio.gather(commit, other)


async def test_a_call_without_a_slot_in_time_fails_saying_how_many_are_ahead() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"start": 1}, stall_s=300, queue_timeout_s=60)
    running = start(gate, engine, "start", "s0")
    queued = [start(gate, engine, "start", f"s{i}") for i in (1, 2)]
    await settle()
    clock.advance(30)
    late = start(gate, engine, "start", "s3")
    await settle()
    clock.advance(31)
    gate.expire()
    for ahead, task in enumerate(queued):
        with pytest.raises(Unavailable) as failed:
            await task
        assert failed.value.message == (
            f"no start slot within 60 s: 1 start calls in flight (at most 1), {ahead} more queued ahead of this one; "
            "retry later"
        )
    assert not late.done() and gate.stats().queued["start"] == 1
    engine.answer("s0")
    await settle()
    engine.answer("s3")
    assert [await running, await late] == ["s0 done", "s3 done"]


async def test_overload_is_entered_and_left_with_hysteresis() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"other": 1}, high_water=4, low_water=2, recover_s=5)
    tasks = [start(gate, engine, "other", f"o{i}") for i in range(6)]  # 1 in flight, 5 queued
    await settle()
    assert gate.pressure() == "5 engine calls are queued (overloaded above 4, until fewer than 2)"
    for i in range(2):  # 3 queued: under high water, still overloaded
        engine.answer(f"o{i}")
        await settle()
    assert gate.stats().queued["other"] == 3 and gate.pressure() is not None
    tasks.append(start(gate, engine, "other", "o6"))  # back to 4: no new entry needed, still overloaded
    await settle()
    for i in range(2, 5):
        engine.answer(f"o{i}")
        await settle()
    assert gate.stats().queued["other"] == 1 and gate.pressure() is None, "left below low water, answered just now"
    for i in range(5, 7):
        engine.answer(f"o{i}")
        await settle()
    await asyncio.gather(*tasks)
    clock.advance(3600)
    assert gate.pressure() is None, "a quiet engine is not an overloaded one"


async def test_overload_after_a_stall_lasts_until_the_engine_answers_again() -> None:
    clock, engine = Clock(), Engine()
    gate = EngineGate(EngineCallSettings(stall_s=30, recover_s=5), clock=clock, no_answer=(TimeoutError,))
    stuck = start(gate, engine, "other", "o0")
    await settle()
    clock.advance(31)
    assert gate.pressure() == "the engine has not answered for 31 s; 1 call is waiting"
    clock.advance(90)
    engine.answer("o0", TimeoutError("read timed out"))  # the client gave up: no answer
    with pytest.raises(TimeoutError):
        await stuck
    await settle()
    assert gate.stats().silence_s == 0
    assert gate.pressure() == "the engine last answered 121 s ago; overloaded until it answers again"
    probe = start(gate, engine, "other", "o1")  # not stalled now: let through
    await settle()
    clock.advance(2)
    assert gate.pressure() is not None
    engine.answer("o1", ValueError("refused"))  # a refusal is an answer
    with pytest.raises(ValueError):
        await probe
    await settle()
    assert gate.pressure() is None


async def test_a_cancelled_waiter_leaves_the_queue_and_frees_no_slot() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"create": 1})
    first = start(gate, engine, "create", "c0")
    second = start(gate, engine, "create", "c1")
    third = start(gate, engine, "create", "c2")
    await settle()
    second.cancel()
    await settle()
    assert second.cancelled()
    stats = gate.stats()
    assert stats.in_flight["create"] == 1 and stats.queued["create"] == 1
    engine.answer("c0")
    await settle()
    assert engine.calls == ["c0", "c2"] and gate.stats().in_flight["create"] == 1
    engine.answer("c2")
    assert [await first, await third] == ["c0 done", "c2 done"]
    assert gate.stats().in_flight["create"] == 0 and gate.stats().peak_in_flight["create"] == 1


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_hands_it_on() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"create": 1})
    first = start(gate, engine, "create", "c0")
    second = start(gate, engine, "create", "c1")
    third = start(gate, engine, "create", "c2")
    await settle()
    # Runs right after the gate hands c0's slot to c1, before c1 wakes up.
    engine.tasks["c0"].add_done_callback(lambda _: second.cancel())
    engine.answer("c0")
    await settle()
    assert second.cancelled()
    assert engine.calls == ["c0", "c2"] and gate.stats().in_flight["create"] == 1
    engine.answer("c2")
    assert [await first, await third] == ["c0 done", "c2 done"]
    assert gate.stats().in_flight["create"] == 0


async def test_a_caller_that_stops_waiting_leaves_its_call_holding_the_slot_to_its_end() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"create": 1})
    first = start(gate, engine, "create", "c0")
    second = start(gate, engine, "create", "c1")
    await settle()
    first.cancel()
    await settle()
    assert first.cancelled() and not engine.tasks["c0"].done()
    assert gate.stats().in_flight["create"] == 1 and engine.calls == ["c0"], "the engine is still at it"
    clock.advance(10)
    engine.answer("c0")  # its answer still counts
    await settle()
    assert gate.stats().since_answer_s == 0 and engine.calls == ["c0", "c1"]
    engine.answer("c1")
    assert await second == "c1 done"


async def test_close_fails_the_queued_calls() -> None:
    clock, engine = Clock(), Engine()
    gate = gate_of(clock, max={"other": 1})
    running = start(gate, engine, "other", "o0")
    queued = start(gate, engine, "other", "o1")
    await settle()
    gate.close()
    with pytest.raises(Unavailable, match="closing"):
        await queued
    engine.answer("o0")
    assert await running == "o0 done"


def test_settings_defaults_and_refusals() -> None:
    settings = EngineCallSettings()
    assert settings.max.model_dump() == {"create": 8, "start": 8, "commit": 2, "remove": 8, "other": 32}
    assert (settings.stall_s, settings.queue_timeout_s, settings.high_water, settings.low_water) == (30, 60, 256, 32)
    for field in (*EngineCallSettings.model_fields.values(), *type(settings.max).model_fields.values()):
        assert field.description, "every setting says what it is"
    with pytest.raises(ValidationError, match="low_water"):
        EngineCallSettings(high_water=10, low_water=10)
    with pytest.raises(ValidationError):
        EngineCallSettings.model_validate({"max": {"build": 1}})
    with pytest.raises(ValidationError):
        EngineCallSettings.model_validate({"max": {"create": 0}})


async def test_the_gates_own_timer_fails_a_call_that_waited_too_long() -> None:
    """The one test on the real clock: nobody calls ``expire``, the gate's timer does (after 50 ms)."""
    engine = Engine()
    gate = EngineGate(EngineCallSettings.model_validate({"max": {"other": 1}, "queue_timeout_s": 0.05}))
    running = start(gate, engine, "other", "o0")
    queued = start(gate, engine, "other", "o1")
    with pytest.raises(Unavailable, match=r"no other slot within 0.05 s: 1 other calls in flight"):
        await asyncio.wait_for(queued, 5)
    engine.answer("o0")
    assert await running == "o0 done"
    assert gate._timer is None, "no timer is left armed once nothing is queued"


class StuckClient:
    """A docker client whose engine answers nothing until released."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.api = self

    def containers(self, **filters: Any) -> list[dict[str, Any]]:
        raise AssertionError("a call reached the stalled engine")

    def info(self) -> dict[str, Any]:
        self.released.wait(10)
        return {}

    def close(self) -> None:
        pass


async def test_the_docker_backend_sends_its_engine_calls_through_the_gate() -> None:
    clock = Clock()
    backend = DockerBackend(DockerConfig(owner="gate-test", socket_root="/tmp/gate-test"))
    client = StuckClient()
    backend._client = client
    backend._call.gate = backend.engine_gate = EngineGate(backend.config.engine_calls, clock=clock, no_answer=NO_ANSWER)
    try:
        probe = asyncio.ensure_future(backend.ping())
        await settle()
        assert backend.engine_gate.stats().in_flight["other"] == 1
        clock.advance(31)
        with pytest.raises(Unavailable) as refused:
            await backend.list_instances()
        assert refused.value.message == (
            "list instances: the engine has not answered for 31 s; 1 call is waiting; retry later"
        )
        assert backend.pressure() == "the engine has not answered for 31 s; 1 call is waiting"
        client.released.set()
        await probe
        assert backend.pressure() is None
    finally:
        client.released.set()
        await backend.close()
