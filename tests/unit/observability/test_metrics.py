"""``/metrics`` after a scenario: every counter and histogram moved by exactly what the scenario did.

The module's service is shared by its tests, so every check is a difference between two scrapes."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sandbox.client import AsyncClient
from sandbox.errors import NotFound
from sandbox.models import SandboxKind, SandboxSpec, SandboxState
from sandbox.observability.logs import JsonFormatter
from sandbox.service import SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from tests.polling import eventually
from tests.unit.conftest import ALPHA_TOKEN, LOGGER

AUTH = {"Authorization": f"Bearer {ALPHA_TOKEN}"}
OP = "sandbox_operation_duration_seconds"
STEPS = 5


@dataclass(frozen=True)
class Scrape:
    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float]

    def value(self, name: str, **labels: str) -> float:
        return self.samples.get((name, frozenset(labels.items())), 0.0)

    def total(self, name: str, **labels: str) -> float:
        """The sum over every series of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, have), v in self.samples.items() if n == name and wanted <= have)

    def calls(self, operation: str, kind: str = "terminal", outcome: str = "ok") -> float:
        return self.value(f"{OP}_count", operation=operation, kind=kind, outcome=outcome)


async def scrape(api: httpx.AsyncClient) -> Scrape:
    response = await api.get("/metrics")  # no token: like /healthz
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    return Scrape(samples)


def moved(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


async def test_a_scenario_over_grpc_and_rest_moves_every_counter_by_what_it_did(
    alpha: AsyncClient, api: httpx.AsyncClient
) -> None:
    before = await scrape(api)

    over_grpc = await alpha.create(kind="terminal")
    created = await api.post("/v1/sandboxes", json={"kind": "terminal"}, headers=AUTH)
    assert created.status_code == 201, created.text
    over_rest = str(created.json()["id"])
    during = await scrape(api)

    for i in range(STEPS - 2):
        obs = await over_grpc.step({"type": "exec", "cmd": f"echo {i}"})
        assert obs.exec is not None and obs.exec.stdout == f"{i}\n"
    for i in range(2):
        stepped = await api.post(
            f"/v1/sandboxes/{over_rest}/step", json={"action": {"type": "exec", "cmd": f"echo {i}"}}, headers=AUTH
        )
        assert stepped.status_code == 200, stepped.text
    assert (await over_grpc.exec("true")).exit_code == 0
    await over_grpc.observe()

    with pytest.raises(NotFound):
        await alpha.get("term-000000000000")
    missing = await api.get("/v1/sandboxes/term-000000000000/observe", headers=AUTH)
    assert missing.status_code == 404
    invalid = await api.post("/v1/sandboxes", json={"kind": "spaceship"}, headers=AUTH)
    assert invalid.status_code == 422

    await over_grpc.reset()
    await over_grpc.close()
    assert (await api.delete(f"/v1/sandboxes/{over_rest}", headers=AUTH)).status_code == 204
    after = await scrape(api)

    # Latency histograms: one observation per call, in the right series.
    assert moved(before, after, f"{OP}_count", operation="create", kind="terminal", outcome="ok") == 2
    assert moved(before, after, f"{OP}_count", operation="step", kind="terminal", outcome="ok") == STEPS
    assert moved(before, after, f"{OP}_count", operation="exec", kind="terminal", outcome="ok") == 1
    assert moved(before, after, f"{OP}_count", operation="observe", kind="terminal", outcome="ok") == 1
    assert moved(before, after, f"{OP}_count", operation="reset", kind="terminal", outcome="ok") == 1
    assert moved(before, after, f"{OP}_count", operation="delete", kind="terminal", outcome="ok") == 2
    # The bad id never reached a sandbox: its kind is unknown.
    assert moved(before, after, f"{OP}_count", operation="get", kind="unknown", outcome="error") == 1
    assert moved(before, after, f"{OP}_count", operation="observe", kind="unknown", outcome="error") == 1
    assert after.total(f"{OP}_count", outcome="error") - before.total(f"{OP}_count", outcome="error") == 2
    step = {"operation": "step", "kind": "terminal", "outcome": "ok"}
    assert moved(before, after, f"{OP}_bucket", **step, le="+Inf") == STEPS
    assert moved(before, after, f"{OP}_sum", **step) > 0
    assert moved(before, after, f"{OP}_bucket", **step, le="60.0") == STEPS

    # Errors by code and transport, counted once each at the skin that answered.
    errors = "sandbox_api_errors_total"
    assert moved(before, after, errors, transport="grpc", method="GetSandbox", code="NOT_FOUND") == 1
    route = "GET /v1/sandboxes/{sandbox_id}/observe"
    assert moved(before, after, errors, transport="rest", method=route, code="NOT_FOUND") == 1
    assert moved(before, after, errors, transport="rest", method="POST /v1/sandboxes", code="INVALID_ARGUMENT") == 1
    assert after.total(errors) - before.total(errors) == 3

    # Two creates and a reset: three cold starts (no pool here).
    assert moved(before, after, "sandbox_provisions_total", kind="terminal", source="cold") == 3
    assert moved(before, after, "sandbox_provisions_total", kind="terminal", source="warm") == 0

    # Gauges read at scrape time: what exists then.
    running = {"kind": "terminal", "state": "running"}
    assert moved(before, during, "sandbox_sandboxes", **running) == 2
    assert moved(before, after, "sandbox_sandboxes", **running) == 0
    for kind in SandboxKind:
        for state in SandboxState:
            assert ("sandbox_sandboxes", frozenset({"kind": kind.value, "state": state.value}.items())) in (
                after.samples
            ), "every kind and state is reported, zeros included"


async def test_pools_health_recovery_and_expiry_are_counted(
    service: SandboxService, alpha: AsyncClient, api: httpx.AsyncClient
) -> None:
    spec = SandboxSpec(kind=SandboxKind.TERMINAL)
    key = service.pools.add(spec, service.backend.image_for(spec), min=1, max=1)
    await service.pools.refill()
    await eventually(lambda: _ready(service, key, 1), 30, "the pool filling")
    before = await scrape(api)
    assert before.value("sandbox_pool_ready_instances", pool=key, kind="terminal") == 1
    assert before.value("sandbox_pool_min_instances", pool=key, kind="terminal") == 1
    assert before.value("sandbox_pool_starting_instances", pool=key, kind="terminal") == 0

    warm = await alpha.create(kind="terminal")  # takes the warm instance
    service.pools.remove(key)
    recovering = await alpha.create(kind="terminal", auto_recover=True)
    failing = await alpha.create(kind="terminal")
    expiring = await alpha.create(kind="terminal", ttl_s=0.2)
    for sandbox in (recovering, failing):  # their containers vanish under them
        doc = await service.store.get("sandboxes", sandbox.id)
        assert doc is not None
        await service.backend.destroy(str(doc["instance"]))
    lifecycle = Lifecycle(service, LifecycleSettings(), logger=LOGGER)
    await lifecycle.check_health()
    await asyncio.sleep(0.3)
    await lifecycle.expire_leases()
    await lifecycle.tick()
    leading = await scrape(api)
    await lifecycle.stop()
    after = await scrape(api)

    assert after.value("sandbox_pool_ready_instances", pool=key, kind="terminal") == 0, "a removed pool is gone"
    assert moved(before, after, "sandbox_provisions_total", kind="terminal", source="warm") == 1
    # Four creates, one of them warm, and one replacement of the auto_recover sandbox.
    assert moved(before, after, "sandbox_provisions_total", kind="terminal", source="cold") == 4
    failures = "sandbox_health_failures_total"
    assert moved(before, after, failures, kind="terminal", cause="container_gone") == 2
    assert after.total(failures) - before.total(failures) == 2
    assert moved(before, after, "sandbox_replacements_total", kind="terminal") == 1
    assert moved(before, after, "sandbox_expirations_total", kind="terminal", reason="ttl") == 1
    assert moved(before, after, "sandbox_expirations_total", kind="terminal", reason="idle") == 0
    assert moved(before, after, "sandbox_sandboxes", kind="terminal", state="running") == 2  # warm, recovering
    assert moved(before, after, "sandbox_sandboxes", kind="terminal", state="unhealthy") == 1
    assert moved(before, after, "sandbox_sandboxes", kind="terminal", state="expired") == 1
    assert leading.value("sandbox_lifecycle_leader") == 1
    assert after.value("sandbox_lifecycle_leader") == 0

    for sandbox in (warm, recovering, failing, expiring):
        await sandbox.close()


TENANT_SERIES = ("sandbox_tenant_reserved", "sandbox_admission_refusals")
"""The only series a tenant labels: capacity and quota use, bounded by the tokens file's tenants."""


async def test_metrics_carry_no_sandbox_id_and_a_tenant_only_on_its_capacity_series(
    alpha: AsyncClient, api: httpx.AsyncClient
) -> None:
    async with await alpha.create(kind="terminal") as sandbox:
        await sandbox.exec("true")
        text = (await api.get("/metrics")).text
    assert sandbox.id not in text
    with_tenant = [line for line in text.splitlines() if "alpha" in line]
    assert with_tenant, "the tenant's reservation is not reported"
    assert all(line.startswith(TENANT_SERIES) for line in with_tenant), with_tenant
    assert 'sandbox_tenant_reserved{resource="sandboxes",tenant="alpha"} 1.0' in text


async def test_a_log_line_is_one_json_object_with_the_sandbox_and_tenant(
    alpha: AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        async with await alpha.create(kind="terminal") as sandbox:
            pass
    created = next(r for r in caplog.records if r.getMessage().startswith("created sandbox"))
    line = JsonFormatter().format(created)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "INFO" and entry["logger"] == LOGGER.name
    assert entry["message"] == f"created sandbox {sandbox.id} on {entry['instance']}"
    assert entry["sandbox_id"] == sandbox.id and entry["tenant"] == "alpha"
    assert entry["ts"].endswith("Z") and time.time() - _epoch(entry["ts"]) < 60


def test_a_json_log_line_carries_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("sandbox.x", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
        record.exc_info = sys.exc_info()
    record.duration_ms = 12.5
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "failed here" and entry["duration_ms"] == 12.5
    assert "ValueError: boom" in entry["exc"]


def _epoch(ts: str) -> float:
    return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


async def _ready(service: SandboxService, key: str, count: int) -> bool:
    return len(await service.store.items(key)) >= count


async def test_network_isolation_is_reported_only_by_a_backend_that_checks_it(
    service: SandboxService, api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "sandbox_network_isolation{" not in (await api.get("/metrics")).text  # the fake backend checks nothing
    backend = service.provisioner.backend
    monkeypatch.setattr(backend, "isolation", lambda: ("not_enforced", "a probe pod connected to another"))
    text = (await api.get("/metrics")).text
    assert 'sandbox_network_isolation{state="not_enforced"} 1.0' in text
    monkeypatch.setattr(backend, "isolation", lambda: ("enforced", "refused"))
    text = (await api.get("/metrics")).text
    assert 'sandbox_network_isolation{state="enforced"} 1.0' in text and '{state="not_enforced"}' not in text
