"""The admission section's and the density model line's pure parts: options, the capacity model's figures, the
timing helpers (on fake clocks), the flood's tally and the rows (no engine, no server)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from types import SimpleNamespace
from typing import Any

import pytest

from bench import BenchError
from bench.capacity import describe_limit, engine_host, host_memory_for, model_limit, within
from bench.cli import parse
from bench.flood import MAX_CALLS, Tally, flood, summary_of
from bench.options import QUICK, SECTION_NAMES, make_options
from bench.report import render_text
from bench.sections import admission
from bench.sections.admission import _result, finish, per_call, probe_rounds, refusals_counted
from bench.sections.density import model_row
from bench.stats import Summary, Value
from sandbox.backends.base import HostFacts
from sandbox.capacity.settings import CapacitySettings, KindRequest
from sandbox.errors import CapacityExhausted, NotFound, ResourceExhausted
from sandbox.models import SandboxKind

HOST = HostFacts(cpus=2.0, memory_mb=24105.0, pids=32768)
"""This machine as the docker backend sees it (2 cores, 23.5 GiB, the kernel's pid_max)."""
PINNED = CapacitySettings(
    requests={
        SandboxKind.TERMINAL: KindRequest(cpus=0.01, memory_mb=32, pids=16),
        SandboxKind.DESKTOP: KindRequest(cpus=0.05, memory_mb=160, pids=64),
    }
)
"""The requests as they were measured and set (so the figures below do not move with the defaults)."""


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# ---------------------------------------------------------------------------------------------- options


def test_admission_is_a_section_with_its_options_and_a_quick_variant() -> None:
    assert SECTION_NAMES.index("admission") == SECTION_NAMES.index("burst") + 1
    quick = make_options(quick=True, overrides={})
    assert quick.admission_flood_seconds == QUICK["admission_flood_seconds"] == 3.0
    assert quick.admission_samples < make_options(quick=False, overrides={}).admission_samples
    options = parse(["--only", "admission", "--admission-hold", "4", "--admission-flood-seconds", "2.5"])
    assert options.sections == ("admission",)
    assert options.admission_hold == 4 and options.admission_flood_seconds == 2.5
    assert options.admission_flood_loops == 8 and not options.quick


def test_a_negative_flood_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--admission-flood-loops", "-2"])
    assert "argument --admission-flood-loops: -2 is negative" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- the model's figures


def test_the_models_limit_on_this_machine() -> None:
    # (24,105 - 8% reserve) / 32 MiB; 7 allocatable CPUs (x4 overcommit) would hold 700; pids 1,792.
    assert model_limit(HOST, "terminal", PINNED) == 693
    assert model_limit(HOST, "desktop", PINNED) == 138


def test_the_model_is_refused_when_disabled() -> None:
    with pytest.raises(BenchError, match="disabled"):
        model_limit(HOST, "terminal", CapacitySettings(enabled=False))


@pytest.mark.parametrize("count", [1, 8, 100, 650])
def test_a_host_memory_that_holds_exactly_count(count: int) -> None:
    memory = host_memory_for(count, "terminal", HOST, PINNED)
    small = HostFacts(cpus=HOST.cpus, memory_mb=memory, pids=HOST.pids)
    assert model_limit(small, "terminal", PINNED) == count
    assert model_limit(HostFacts(HOST.cpus, memory - 32, HOST.pids), "terminal", PINNED) == count - 1


def test_the_8_terminal_host_is_the_absolute_reserve_and_eight_and_a_half_requests() -> None:
    assert host_memory_for(8, "terminal", HOST, PINNED) == 1024 + 8 * 32 + 16


def test_a_host_whose_cpus_bind_first_is_refused() -> None:
    few = HostFacts(cpus=0.3, memory_mb=24105.0, pids=32768)  # (0.3 - 0.25) x 4 / 0.01: 20 terminals at most
    with pytest.raises(BenchError, match="CPUs or pids bind first"):
        host_memory_for(50, "terminal", few, PINNED)


def test_the_engines_host_takes_its_memory_and_cpus_and_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    info: dict[str, Any] = {"MemTotal": 4 << 30, "NCPU": 2}
    host = engine_host(info)
    assert (host.cpus, host.memory_mb) == (2.0, 4096.0) and host.pids > 0
    assert engine_host(info, memory_mb=1296).memory_mb == 1296


def test_within_twenty_percent_of_the_density_measured() -> None:
    assert within(650, 693) and within(130, 138) and within(100, 80) and within(100, 120)
    assert not within(100, 79) and not within(100, 121) and not within(0, 5)
    assert describe_limit(650, 693, "the maximum was reached") == (
        "measured 650 (the maximum was reached) / model 693 = 0.94"
    )
    assert describe_limit(3, 0, "x").endswith("= -")


def test_the_density_model_row() -> None:
    full = model_row("terminal", 650, 693, maximum=1100, stopped="p99 120 ms > 100 ms at 700")
    assert full.target is not None and full.target.met is True
    assert full.ratio == pytest.approx(650 / 693)
    assert full.ours == Value(650, "sandboxes") and full.baseline == Value(693, "sandboxes")
    assert full.note == "measured 650 (p99 120 ms > 100 ms at 700) / model 693 = 0.94"
    broke = model_row("desktop", 90, 138, maximum=220, stopped="p99 140 ms > 100 ms at 100")
    assert broke.target is not None and broke.target.met is False
    quick = model_row("terminal", 20, 693, maximum=20, stopped="the maximum was reached")
    assert quick.target is not None and quick.target.met is None and "ramp max 20" in quick.target.text


# ---------------------------------------------------------------------------------------------- timing helpers


def test_per_call_spreads_a_batchs_time_over_its_calls() -> None:
    clock = Clock()
    calls = []

    def call() -> None:
        calls.append(1)
        clock.advance(2e-6)

    samples = per_call(call, 1000, batch=100, clock=clock)
    assert len(samples) == 10 and len(calls) == 1000
    assert all(s == pytest.approx(2e-6) for s in samples)
    assert len(per_call(call, 5, batch=100, clock=clock)) == 1, "at least one batch"


class _Suspends:
    def __await__(self) -> Generator[None, None, None]:
        yield


def test_finish_runs_a_coroutine_that_never_waits() -> None:
    async def value() -> int:
        return 7

    async def refused() -> int:
        raise CapacityExhausted("full")

    async def waits() -> int:
        await _Suspends()
        return 1

    assert finish(value()) == 7
    with pytest.raises(CapacityExhausted):
        finish(refused())
    with pytest.raises(BenchError, match="waited"):
        finish(waits())


def test_probe_rounds_time_each_call_in_turn_until_stopped() -> None:
    clock = Clock()
    order: list[str] = []

    def probe(name: str, took: float) -> Any:
        async def call() -> None:
            order.append(name)
            clock.advance(took)

        return call

    rounds: list[int] = []
    step, health = asyncio.run(
        probe_rounds([probe("step", 0.003), probe("health", 0.001)], 3, on_round=rounds.append, clock=clock)
    )
    assert order == ["step", "health"] * 3 and rounds == [1, 2, 3]
    assert step == pytest.approx([0.003] * 3) and health == pytest.approx([0.001] * 3)
    stopped = asyncio.run(probe_rounds([probe("step", 0.5)], 100, stop=lambda: clock() >= 2.0, clock=clock))
    assert len(stopped[0]) == 4, "stops at the first round that starts after the stop"


def test_the_servers_refusal_counter_is_summed_over_tenants_and_reasons() -> None:
    text = "\n".join(
        [
            "# HELP sandbox_admission_refusals_total Starts refused by admission",
            "# TYPE sandbox_admission_refusals_total counter",
            'sandbox_admission_refusals_total{reason="capacity",tenant="admin"} 4710.0',
            'sandbox_admission_refusals_total{reason="quota",tenant="team-a"} 2.0',
            'sandbox_admission_refusals_created{reason="capacity",tenant="admin"} 1.7e+09',
            "sandbox_admission_waiting 0.0",
        ]
    )
    assert refusals_counted(text) == 4712.0
    assert refusals_counted("") == 0.0


# ---------------------------------------------------------------------------------------------- the flood


def test_a_flood_counts_refusals_admissions_and_errors_within_its_time() -> None:
    clock = Clock()
    outcomes = iter([ResourceExhausted("full")] * 5 + [None, NotFound("gone")] + [ResourceExhausted("full")] * 100)

    async def attempt() -> None:
        clock.advance(0.1)
        await asyncio.sleep(0)  # the loops take turns, as they do on a connection
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    tally = asyncio.run(flood(attempt, 4, 1.0, clock=clock))
    assert tally.admitted == 1 and dict(tally.errors) == {"NotFound": 1}
    assert tally.calls == len(tally.refused) + 2
    assert all(t > 0.099 for t in tally.refused), "each from its own start, the other loops' turns included"
    assert tally.seconds >= 1.0 and tally.rate == len(tally.refused) / tally.seconds
    assert clock() < 1.0 + 4 * 0.1 + 1e-9, "no loop starts a call after the end"


def test_a_flood_is_bounded_in_count() -> None:
    clock = Clock()

    async def attempt() -> None:
        raise ResourceExhausted("full")  # takes no time: only the count bounds it

    tally = asyncio.run(flood(attempt, 3, 10.0, max_calls=50, clock=clock))
    assert tally.calls == 50 and MAX_CALLS >= 100_000


def test_a_tally_travels_as_json_and_back() -> None:
    tally = Tally(refused=[0.001, 0.002, 0.004], admitted=0, seconds=2.0, warmup=1)
    document = tally.to_json()
    assert (document["refused"], document["rate"], document["warmup"]) == (3, 1.5, 1)
    assert summary_of(document["latency"]) == Summary.of([0.001, 0.002, 0.004])
    assert Tally().to_json()["latency"] is None and summary_of(None) is None


# ---------------------------------------------------------------------------------------------- the rows


def test_the_admission_rows() -> None:
    bench = SimpleNamespace(options=make_options(quick=True, overrides={}))
    flood_json = {
        **Tally(refused=[0.004] * 30, seconds=3.0, warmup=1).to_json(),
        "errors": {"Unavailable": 2},
    }
    result = _result(
        bench,  # type: ignore[arg-type]
        HostFacts(cpus=2.0, memory_mb=1296, pids=32768),
        {"refusal": [16e-6] * 3, "admit_refused": [34e-6] * 3, "admit_granted": [18e-6] * 3},
        [0.0011] * 5,
        [0.0008] * 5,
        flood_json,
        [[0.003] * 4, [0.0015] * 4],
        [[0.007] * 4, [0.003] * 4],
        (8, 8),
        31.0,
    )
    names = [row.name for row in result.rows]
    assert names[0] == "refused create, host full (8 terminals), SDK" and len(names) == 8
    refused = result.rows[0]
    assert refused.ratio == pytest.approx(0.0008 / 0.0011) and refused.note.endswith("+0.30 ms from the baseline's")
    rate = result.rows[4]
    assert rate.ours == Value(10.0, "refusals/s", 30)
    assert "the server counted 31 refusals for 31 seen" in rate.note and "2 Unavailable" in rate.note
    text = render_text(result.rows)
    assert "16.0 µs" in text and "0.43x" in text
    assert result.details["flood"]["containers_after"] == 8 and result.details["host"]["memory_mb"] == 1296


def test_the_section_refuses_counts_of_zero_before_touching_the_engine() -> None:
    options = make_options(quick=True, overrides={"admission_hold": 0, "admission_flood_loops": 0})
    bench = SimpleNamespace(options=options, progress=None, docker=None)
    with pytest.raises(BenchError, match="--admission-hold, --admission-flood-loops must be at least 1"):
        asyncio.run(admission.run(bench))  # type: ignore[arg-type]
