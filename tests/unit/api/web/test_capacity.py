"""The list page's capacity panel over the fake backend on a small host (room for 6 terminals): the report reaches
the list's poll with the waiting calls' positions, each session sees only what its principal may (a tenant its own
row and its own waiting calls, an admin every tenant), refusals per tenant and reason, the pressure banner's reason,
and the page holds the panel."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from sandbox.api.rest import create_app
from sandbox.capacity.pressure import MemoryPressure
from sandbox.capacity.settings import CapacitySettings
from sandbox.errors import CapacityExhausted
from sandbox.models import SandboxInfo, SandboxKind, SandboxSpec
from sandbox.service import Principal, SandboxService, TokenRegistry
from sandbox.service.tickets import TicketIssuer
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_backend import FakeBackend, FakeConfig
from tests.polling import eventually
from tests.unit.conftest import ADMIN_TOKEN, ALPHA_TOKEN, BETA_TOKEN, LOGGER, TOKENS

HOST_MEMORY_MB = 1224
"""With the default settings (1 GiB kept for the host): 200 MiB allocatable, 6 terminals of 32 MiB (pinned below)."""
CAPACITY = CapacitySettings.model_validate({"requests": {"terminal": {"cpus": 0.01, "memory_mb": 32, "pids": 16}}})
TERMINAL = SandboxSpec(kind=SandboxKind.TERMINAL)
PRINCIPALS = TokenRegistry.from_mapping(TOKENS)
ALPHA_P, BETA_P = PRINCIPALS.authenticate(ALPHA_TOKEN), PRINCIPALS.authenticate(BETA_TOKEN)
GAMMA_P = Principal("gamma")
"""A tenant with no token of the view's: refused while it holds nothing."""


@pytest_asyncio.fixture(scope="module")
async def service(socket_root: str) -> AsyncIterator[SandboxService]:
    store = await EmbeddedStore.open(None, logger=LOGGER)
    backend = FakeBackend(FakeConfig(socket_root=socket_root, host_memory_mb=HOST_MEMORY_MB))
    service = SandboxService(backend, store, logger=LOGGER, capacity=CAPACITY)
    await service.start()
    yield service
    await service.close()
    await backend.close()
    await store.close()


@pytest_asyncio.fixture(scope="module")
async def api(service: SandboxService) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(service, PRINCIPALS, logger=LOGGER, tickets=TicketIssuer(ttl_s=30))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
        yield client


@pytest_asyncio.fixture(scope="module")
async def full_host(service: SandboxService) -> AsyncIterator[dict[str, Any]]:
    """The host full (alpha 4 terminals, beta 2), a refusal each for beta and gamma, and a create of alpha's then
    one of beta's waiting for capacity, in that order."""
    made: list[tuple[Principal, SandboxInfo]] = []
    waiting: list[asyncio.Task[SandboxInfo]] = []
    try:
        for principal in (ALPHA_P,) * 4 + (BETA_P,) * 2:
            made.append((principal, await service.create(principal, TERMINAL)))
        for principal in (BETA_P, GAMMA_P):
            with pytest.raises(CapacityExhausted):
                await service.create(principal, TERMINAL)
        for principal in (ALPHA_P, BETA_P):
            waiting.append(asyncio.create_task(create_waiting(service, principal)))
            await eventually(partial(service.waiting, principal), 10, f"{principal.tenant}'s create waiting")
        yield {"made": made}
    finally:
        for task in waiting:
            task.cancel()
        for task in waiting:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for principal, info in made:
            await service.delete(principal, info.id)


async def create_waiting(service: SandboxService, principal: Principal) -> SandboxInfo:
    return await service.create(principal, TERMINAL, wait_s=30)


async def session(api: httpx.AsyncClient, token: str) -> dict[str, str]:
    signed_in = await api.get("/view", params={"token": token})
    assert signed_in.status_code == 303, signed_in.text
    return {"Cookie": signed_in.headers["set-cookie"].split(";")[0]}


async def panel(api: httpx.AsyncClient, token: str) -> dict[str, Any]:
    """The capacity report of the list's poll, as the page gets it."""
    r = await api.get("/view/api/sandboxes", headers=await session(api, token))
    assert r.status_code == 200, r.text
    capacity: dict[str, Any] = r.json()["capacity"]
    return capacity


async def test_the_poll_carries_the_host_and_the_waiting_calls_positions(
    api: httpx.AsyncClient, full_host: dict[str, Any]
) -> None:
    cap = await panel(api, ADMIN_TOKEN)
    assert cap["bounded"] is True and cap["under_pressure"] is None
    assert cap["allocatable"]["memory_mb"] == 200 and cap["held"]["memory_mb"] == 192
    assert cap["free"]["memory_mb"] == 8 and cap["warm"]["memory_mb"] == 0 and cap["granted"]["memory_mb"] == 0
    assert cap["fits_now"]["terminal"] == 0 and cap["fits_empty"]["terminal"] == 6
    calls = [(c["position"], c["tenant"], c["kind"], c["count"]) for c in cap["waiting"]]
    assert calls == [(1, "alpha", "terminal", 1), (2, "beta", "terminal", 1)]
    assert all(0 <= c["waited_s"] < 30 and 0 < c["gives_up_in_s"] <= 30 for c in cap["waiting"])
    rows = {row["tenant"]: row for row in cap["tenants"]}
    assert list(rows) == ["alpha", "beta", "gamma"]  # gamma holds nothing, but was refused
    assert rows["alpha"]["sandboxes"] == 4 and rows["alpha"]["reserved"]["memory_mb"] == 128
    assert rows["alpha"]["refusals"] == {}
    assert rows["beta"]["sandboxes"] == 2 and rows["beta"]["refusals"] == {"capacity": 1}
    assert rows["gamma"]["sandboxes"] == 0 and rows["gamma"]["refusals"] == {"capacity": 1}
    assert set(rows["beta"]["quota"]) >= {"max_sandboxes", "max_memory_mb"}


async def test_a_tenant_sees_only_its_own_row_and_waiting_calls(
    api: httpx.AsyncClient, full_host: dict[str, Any]
) -> None:
    alpha = await panel(api, ALPHA_TOKEN)
    assert [(c["position"], c["tenant"]) for c in alpha["waiting"]] == [(1, "alpha")]
    assert [(r["tenant"], r["sandboxes"], r["refusals"]) for r in alpha["tenants"]] == [("alpha", 4, {})]
    beta = await panel(api, BETA_TOKEN)
    assert [(c["position"], c["tenant"]) for c in beta["waiting"]] == [(2, "beta")]  # its place in the one queue
    assert [(r["tenant"], r["sandboxes"], r["refusals"]) for r in beta["tenants"]] == [("beta", 2, {"capacity": 1})]
    for theirs, others in ((alpha, ("beta", "gamma")), (beta, ("alpha", "gamma"))):
        text = json.dumps(theirs)
        assert not [name for name in others if f'"{name}"' in text], text


async def test_memory_pressure_reaches_the_banner(
    service: SandboxService, api: httpx.AsyncClient, tmp_path: Path, full_host: dict[str, Any]
) -> None:
    psi = tmp_path / "memory"
    psi.write_text("some avg10=40.00 avg60=30.00 avg300=10.00 total=1\n")
    before = service.admission.pressure
    service.admission.pressure = MemoryPressure(high=25, low=5, path=psi)
    try:
        cap = await panel(api, BETA_TOKEN)
    finally:
        service.admission.pressure = before
    assert cap["under_pressure"] is not None and "memory pressure" in cap["under_pressure"]


async def test_the_list_page_holds_the_panel(api: httpx.AsyncClient) -> None:
    page = await api.get("/view", headers=await session(api, ALPHA_TOKEN))
    assert page.status_code == 200
    for part in ('id="capacity"', 'id="pressure"', 'id="cap-bars"', 'id="cap-fit"', 'id="cap-waiting"',
                 'id="cap-tenants"', "Waiting for capacity"):  # fmt: skip
        assert part in page.text, part
    script = await api.get("/view/static/capacity.js")
    assert script.status_code == 200 and "export function renderCapacity" in script.text
    assert "renderCapacity(body.capacity)" in (await api.get("/view/static/list.js")).text
