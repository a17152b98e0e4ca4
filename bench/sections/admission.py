"""admission: what the control plane's capacity admission costs a create it refuses, and what a full host does under
a flood of creates.

The control plane is given a small host (``capacity.host_memory_mb`` such that ``admission_hold`` terminals fit; the
engine's CPUs and pids) and filled with that many terminals (one ``create_group``).

Decisions: ``admission_samples`` creates through the SDK, one at a time, each refused at once (RESOURCE_EXHAUSTED,
"cannot start ..."), each followed by a get of a sandbox that does not exist (NOT_FOUND: an error answered by the
same server through the same path, with no decision made) as the baseline: their ratio shows what the decision adds
to a call. And in this process, the decision alone on a model of the same full host: ``Admission.refusal``, and
``Admission.admit`` refused and granted (on an empty host, the grant given back), ``admission_decisions`` calls
each, timed in batches of ``BATCH`` (a call takes microseconds: the clock's own cost is spread over a batch). The
refusal's log line is off in this process; the server writes it.

Flood: ``admission_flood_loops`` loops send creates back to back for ``admission_flood_seconds`` from a process of
their own (``bench/flood.py``), each to be refused; meanwhile one probe loop here alternates a step (exec ``true``) on
one of the held terminals and ``GET /healthz`` over HTTP, one call at a time. The same probes just before the flood
(``admission_probe_rounds`` of each) are their baseline. The bench's containers are counted by its labels before and
after: nothing may start beyond capacity (the section fails if anything does), and the server's refusal counter
(``/metrics``) is read beside the refusals the flood saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench import BenchError
from bench.capacity import engine_host, engine_info, host_memory_for
from bench.cleanup import owner_filters
from bench.flood import summary_of
from bench.harness import Bench, Platform, SectionResult
from bench.report import Row
from bench.sections.common import step_true
from bench.stats import Summary, Value, speedup
from sandbox.backends.base import HostFacts
from sandbox.capacity.admission import Admission
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.settings import CapacitySettings
from sandbox.client import AsyncSandbox
from sandbox.errors import CapacityExhausted, NotFound, ResourceExhausted
from sandbox.models import SandboxKind, SandboxSpec

NAME = "admission"
KIND = "terminal"
MISSING_ID = "sb-term-000000000000"
"""A sandbox id of the platform's shape that no sandbox has."""
WARMUP = 10
BATCH = 100
"""In-process decisions timed together; each sample is the batch's mean per call."""
MAX_PROBE_ROUNDS = 100_000
"""Bounds the probes during the flood whatever its duration."""
START_TIMEOUT_S = 60.0
TENANT = "bench"
REFUSALS_METRIC = "sandbox_admission_refusals_total{"
ROOT = Path(__file__).resolve().parents[2]
"""Where ``python -m bench.flood`` is run from."""

T = TypeVar("T")


def finish(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (``Admission.admit`` refused, or granted at once) to its end, without an
    event loop: what an ``await`` of it costs beyond the call itself is not measured."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise BenchError("the call waited: it was not decided at once")


def per_call(
    call: Callable[[], object], calls: int, *, batch: int = BATCH, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    """``calls`` calls (at least one batch), timed ``batch`` at a time: each batch's mean per call, in seconds."""
    samples = []
    for _ in range(max(1, calls // batch)):
        begun = clock()
        for _ in range(batch):
            call()
        samples.append((clock() - begun) / batch)
    return samples


def _never() -> bool:
    return False


async def probe_rounds(
    calls: Sequence[Callable[[], Awaitable[None]]],
    rounds: int,
    *,
    stop: Callable[[], bool] = _never,
    on_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[list[float]]:
    """Up to ``rounds`` rounds of each call once, in turn, one at a time, until ``stop()``: each call's latencies."""
    timed: list[list[float]] = [[] for _ in calls]
    for i in range(rounds):
        if stop():
            break
        for call, samples in zip(calls, timed, strict=True):
            begun = clock()
            await call()
            samples.append(clock() - begun)
        if on_round is not None:
            on_round(i + 1)
    return timed


def refusals_counted(metrics: str) -> float:
    """The server's refusals so far, every tenant and reason (``sandbox_admission_refusals_total``)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(REFUSALS_METRIC))


# ---------------------------------------------------------------------------------------------- in this process


def _decisions(host: HostFacts, settings: CapacitySettings, hold: int, calls: int) -> dict[str, list[float]]:
    """The decision alone, timed in this process on a model of the section's full host (and on the same host empty,
    for a grant)."""
    spec = SandboxSpec(kind=SandboxKind(KIND))
    logger = logging.getLogger("bench.admission")
    full = Admission(CapacityModel(settings, host), logger=logger)
    for i in range(hold):
        full.started(f"in-term-{i}", spec, tenant=TENANT, sandbox=f"sb-term-{i}")
    empty = Admission(CapacityModel(settings, host), logger=logger)
    unit = full.model.reservation(spec)
    quota = full.quotas.for_tenant(TENANT, admin=True)
    if full.refusal(TENANT, unit, 1, quota) is None or empty.refusal(TENANT, unit, 1, quota) is not None:
        raise BenchError(f"the model of the section's host does not hold exactly {hold} {KIND}s")

    def refusal() -> None:
        full.refusal(TENANT, unit, 1, quota)

    def admit_refused() -> None:
        try:
            finish(full.admit(TENANT, spec, admin=True))
        except CapacityExhausted:
            return
        raise BenchError("admit granted a create on a full host")

    def admit_granted() -> None:
        finish(empty.admit(TENANT, spec, admin=True)).close()

    return {
        "refusal": per_call(refusal, calls),
        "admit_refused": per_call(admit_refused, calls),
        "admit_granted": per_call(admit_granted, calls),
    }


# ---------------------------------------------------------------------------------------------- against the server


async def _containers(bench: Bench) -> int:
    """The bench's containers on the engine now (any state), found by its labels."""
    done = await bench.docker("ps", "-aq", "--no-trunc", *owner_filters(bench.owner))
    return len(done.stdout.split())


async def _refused_create(platform: Platform) -> None:
    try:
        sandbox = await platform.client.create(KIND)
    except ResourceExhausted:
        return
    await sandbox.close()
    raise BenchError("a create was admitted on a full host")


async def _get_missing(platform: Platform) -> None:
    try:
        await platform.client.get(MISSING_ID)
    except NotFound:
        return
    raise BenchError(f"a get of {MISSING_ID} found a sandbox")


async def _flood(
    bench: Bench, platform: Platform, probes: Sequence[Callable[[], Awaitable[None]]]
) -> tuple[dict[str, Any], list[list[float]]]:
    """The flood from its own process, and the probes timed here meanwhile."""
    o = bench.options
    log = bench.workdir / "flood.log"
    with log.open("ab") as stderr:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.flood", platform.server.grpc_target, str(o.admission_flood_loops),
            str(o.admission_flood_seconds), stdout=asyncio.subprocess.PIPE, stderr=stderr, cwd=ROOT,
        )  # fmt: skip
    assert process.stdout is not None
    try:
        started = await asyncio.wait_for(process.stdout.readline(), START_TIMEOUT_S)
        if not started:
            raise BenchError(f"the flood exited before it started: {log.read_text(errors='replace')[-1000:]}")
        ended = asyncio.Event()
        probing = asyncio.create_task(probe_rounds(probes, MAX_PROBE_ROUNDS, stop=ended.is_set))
        try:
            line = await asyncio.wait_for(process.stdout.readline(), o.admission_flood_seconds + START_TIMEOUT_S)
        finally:
            ended.set()
            during = await probing
        if not line:
            raise BenchError(f"the flood ended without its tally: {log.read_text(errors='replace')[-1000:]}")
        await asyncio.wait_for(process.wait(), START_TIMEOUT_S)
        return json.loads(line), during
    finally:
        if process.returncode is None:  # ours, by its PID
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def _metrics(http: httpx.AsyncClient) -> float:
    return refusals_counted((await http.get("/metrics")).text)


async def run(bench: Bench) -> SectionResult:
    o = bench.options
    hold, progress = o.admission_hold, bench.progress
    counts = ("hold", "samples", "decisions", "flood_loops", "probe_rounds")
    if zero := [f"--admission-{c.replace('_', '-')}" for c in counts if getattr(o, f"admission_{c}") < 1]:
        raise BenchError(f"{', '.join(zero)} must be at least 1 (the probes step a held terminal)")
    info = await engine_info(bench.docker)
    memory = host_memory_for(hold, KIND, engine_host(info))
    host = engine_host(info, memory_mb=memory)
    settings = CapacitySettings(host_memory_mb=memory)
    progress.say(f"admission: {o.admission_decisions} decisions of each kind in this process")
    decisions = _decisions(host, settings, hold, o.admission_decisions)
    async with (
        bench.platform(NAME, {"capacity": {"host_memory_mb": memory}}) as platform,
        httpx.AsyncClient(base_url=platform.server.http_url, timeout=30) as http,
    ):
        report = await platform.client.capacity()
        if report.fits_empty.get(KIND) != hold:
            raise BenchError(f"the server's model holds {report.fits_empty.get(KIND)} {KIND}s, not {hold}")
        progress.say(f"admission: a host of {memory} MiB holds {hold} {KIND}s; filling it")
        held = await platform.client.create_group(hold, KIND)
        fits = (await platform.client.capacity()).fits_now.get(KIND)
        if fits != 0:
            raise BenchError(f"{hold} {KIND}s held and {fits} more fit: the host is not full")
        refused, missing = await _refusals(bench, platform)
        flood, before, during, containers, counted = await _flood_with_probes(bench, platform, http, held[0])
        await asyncio.gather(*(sandbox.close() for sandbox in held))
    return _result(bench, host, decisions, refused, missing, flood, before, during, containers, counted)


async def _refusals(bench: Bench, platform: Platform) -> tuple[list[float], list[float]]:
    """Refused creates, one at a time, each followed by the baseline call."""
    n = bench.options.admission_samples
    calls = [lambda: _refused_create(platform), lambda: _get_missing(platform)]
    await probe_rounds(calls, WARMUP)
    refused, missing = await probe_rounds(
        calls, n, on_round=lambda i: bench.progress.count("admission: refused creates", i, n)
    )
    return refused, missing


async def _flood_with_probes(
    bench: Bench, platform: Platform, http: httpx.AsyncClient, sandbox: AsyncSandbox
) -> tuple[dict[str, Any], list[list[float]], list[list[float]], tuple[int, int], float]:
    o = bench.options

    async def healthz() -> None:
        response = await http.get("/healthz")
        if response.status_code != 200:
            raise BenchError(f"GET /healthz answered {response.status_code}")

    probes = [lambda: step_true(sandbox), healthz]
    rounds = o.admission_probe_rounds
    await probe_rounds(probes, WARMUP)
    before = await probe_rounds(probes, rounds, on_round=lambda i: bench.progress.count("admission: probes", i, rounds))
    containers_before, counted_before = await _containers(bench), await _metrics(http)
    bench.progress.say(
        f"admission: flooding a full host for {o.admission_flood_seconds:g} s from {o.admission_flood_loops} loops "
        f"({containers_before} containers of this run)"
    )
    flood, during = await _flood(bench, platform, probes)
    containers_after, counted_after = await _containers(bench), await _metrics(http)
    bench.progress.say(
        f"admission: {flood['refused']} refused in {flood['seconds']:.1f} s ({flood['rate']:.0f}/s), "
        f"{flood['admitted']} admitted, errors {flood['errors'] or 'none'}; "
        f"containers {containers_before} before, {containers_after} after"
    )
    hold = o.admission_hold
    if flood["admitted"] or containers_before != hold or containers_after != hold:
        raise BenchError(
            f"started beyond capacity: {flood['admitted']} creates admitted on a full host of {hold}; this run's "
            f"containers: {containers_before} before the flood, {containers_after} after"
        )
    if not flood["refused"] or not all(during):
        raise BenchError(f"the flood refused {flood['refused']} creates; probes during it: {[len(d) for d in during]}")
    return flood, before, during, (containers_before, containers_after), counted_after - counted_before


def _result(
    bench: Bench,
    host: HostFacts,
    decisions: dict[str, list[float]],
    refused: list[float],
    missing: list[float],
    flood: dict[str, Any],
    before: list[list[float]],
    during: list[list[float]],
    containers: tuple[int, int],
    counted: float,
) -> SectionResult:
    o = bench.options
    hold = o.admission_hold
    one, base = Summary.of(refused), Summary.of(missing)
    added = (one.p50 - base.p50) * 1000
    rows = [
        Row(NAME, f"refused create, host full ({hold} {KIND}s), SDK", one, base, "get of a missing sandbox, same",
            speedup(base.p50, one.p50), note=f"the refusal's p50 is {added:+.2f} ms from the baseline's"),
        Row(NAME, "Admission.refusal(), in process", Summary.of(decisions["refusal"])),
        Row(NAME, "Admission.admit(), refused, in process", Summary.of(decisions["admit_refused"])),
        Row(NAME, "Admission.admit(), granted and given back, in process", Summary.of(decisions["admit_granted"])),
    ]  # fmt: skip
    loops, seconds = o.admission_flood_loops, o.admission_flood_seconds
    errors = ", ".join(f"{n} {name}" for name, n in flood["errors"].items()) or "none"
    expected = flood["refused"] + flood["warmup"]
    note = (
        f"{flood['admitted']} admitted; this run's containers {containers[0]} before, {containers[1]} after "
        f"(capacity {hold}); the server counted {counted:.0f} refusals for {expected} seen; other errors: {errors}"
    )
    rows.append(Row(NAME, f"creates refused by a full host, {loops} loops for {seconds:g} s",
                    Value(flood["rate"], "refusals/s", flood["refused"]), note=note))  # fmt: skip
    flooded = summary_of(flood["latency"])
    if flooded is not None:
        rows.append(Row(NAME, "refused create during the flood", flooded, one, "one at a time, no flood",
                        speedup(one.p50, flooded.p50)))  # fmt: skip
    for name, calm, busy in zip(("step exec `true` on a held terminal", "GET /healthz (HTTP)"), before, during,
                                strict=True):  # fmt: skip
        calm_s, busy_s = Summary.of(calm), Summary.of(busy)
        rows.append(Row(NAME, f"{name} during the flood", busy_s, calm_s, "same, before the flood",
                        speedup(calm_s.p50, busy_s.p50)))  # fmt: skip
    details = {
        "host": asdict(host),
        "hold": hold,
        "decision_batch": BATCH,
        "flood": {**flood, "containers_before": containers[0], "containers_after": containers[1],
                  "server_refusals": counted},
        "probes_during": {"step": len(during[0]), "healthz": len(during[1])},
        "samples_s": {"refused": refused, "missing": missing},
    }  # fmt: skip
    return SectionResult(rows, details)
