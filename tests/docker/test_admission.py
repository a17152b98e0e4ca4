"""Admission through a real control plane on the real engine: a host model small enough to fill (4 terminals),
tenants with quotas in the tokens file, over gRPC (the SDK), REST and the CLI."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import docker
import httpx
import pytest
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import ResourceExhausted
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess, started
from tests.polling import eventually

pytestmark = pytest.mark.docker

FITS = 4
HOST_MEMORY_MB = 1024 + FITS * 32
"""1 GiB is kept for the host; a terminal reserves 32 MiB (pinned in the settings): room for four."""
TERMINAL_REQUEST = {"cpus": 0.01, "memory_mb": 32, "pids": 16}
ALPHA, BETA, ADMIN = "alpha-token-0123456789", "beta-token-0123456789x", "admin-token-0123456789"
TOKENS = {
    "tokens": {ALPHA: "alpha", BETA: "beta", ADMIN: {"tenant": "ops", "admin": True}},
    "quotas": {"beta": {"max_sandboxes": 1, "max_group": 2}},
}
TERMINAL: dict[str, Any] = {"labels": TEST_LABEL}
OWNER_AD = f"{OWNER}-ad"


@pytest.fixture(scope="module")
def server(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_image(docker_client, "terminal")
    sockets = f"/run/sbx-test-{RUN_ID}-ad"
    settings = {
        "capacity": {"host_memory_mb": HOST_MEMORY_MB, "requests": {"terminal": TERMINAL_REQUEST}},
        "lifecycle": {"tick_s": 0.2, "health_interval_s": 0.5},
    }
    process = ServerProcess(
        tmp_path_factory.mktemp("admission"), owner=OWNER_AD, socket_root=sockets, settings=settings, tokens=TOKENS
    )
    with owned_by(docker_client, OWNER_AD, sockets), started(process):
        yield process


@pytest_asyncio.fixture
async def alpha(server: ServerProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.grpc_target, token=ALPHA, timeout=60) as client:
        yield client
        for info in await client.list():
            await (await client.get(info.id)).close()


def _containers(docker_client: docker.DockerClient) -> int:
    return len(docker_client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={OWNER_AD}"}))


async def test_a_group_far_beyond_capacity_is_refused_at_once_with_nothing_started(
    server: ServerProcess, alpha: AsyncClient, docker_client: docker.DockerClient
) -> None:
    before = _containers(docker_client)
    started_at = time.monotonic()
    with pytest.raises(ResourceExhausted) as refused:
        await alpha.create_group(512, "terminal", wait_s=30, **TERMINAL)  # never fits: no wait
    took = time.monotonic() - started_at
    assert "cannot start 512 terminal sandboxes" in refused.value.message
    assert f"Ask for at most {FITS} at once" in refused.value.message
    assert took < 10, f"the refusal took {took:.1f} s"
    assert _containers(docker_client) == before, "a refused group started containers"
    async with httpx.AsyncClient(base_url=server.http_url, headers={"authorization": f"Bearer {ALPHA}"}) as http:
        answer = await http.post("/v1/sandboxes:group", json={"spec": {"kind": "terminal"}, "count": 512})
    assert answer.status_code == 429 and answer.headers["retry-after"] == "5"
    assert answer.json()["error"]["code"] == "capacity_exhausted"
    assert _containers(docker_client) == before


async def test_a_group_that_fits_is_admitted_and_the_next_create_is_refused_naming_what_is_free(
    server: ServerProcess, alpha: AsyncClient
) -> None:
    group = await alpha.create_group(FITS, "terminal", **TERMINAL)
    assert len(group) == FITS
    assert (await group[0].exec("echo up")).stdout == "up\n"
    with pytest.raises(ResourceExhausted, match=r"0 fit now\. .*wait_s"):
        await alpha.create("terminal", **TERMINAL)
    report = await alpha.capacity()
    assert report.bounded and report.fits_now["terminal"] == 0 and report.fits_empty["terminal"] == FITS
    assert report.tenants[0].tenant == "alpha" and report.tenants[0].sandboxes == FITS


async def test_a_waiting_group_is_served_as_other_sandboxes_are_deleted(
    server: ServerProcess, alpha: AsyncClient
) -> None:
    held = await alpha.create_group(FITS, "terminal", **TERMINAL)
    waiting = asyncio.create_task(alpha.create_group(2, "terminal", wait_s=120, **TERMINAL))

    async def queued() -> bool:
        return [(w.count, w.position) for w in await alpha.waiting()] == [(2, 1)]

    await eventually(queued, 15, "the group's call queued for capacity")
    async with httpx.AsyncClient(base_url=server.http_url, headers={"authorization": f"Bearer {ALPHA}"}) as http:
        listed = (await http.get("/v1/sandboxes")).json()
    assert [(w["count"], w["position"]) for w in listed["waiting"]] == [(2, 1)]
    await held[0].close()
    assert not waiting.done(), "one freed is not room for a group of two"
    await held[1].close()
    served: list[AsyncSandbox] = await asyncio.wait_for(waiting, 60)
    assert len(served) == 2 and await alpha.waiting() == []
    for sandbox in served:
        assert (await sandbox.exec("true")).exit_code == 0


async def test_quotas_hold_over_grpc_and_rest(server: ServerProcess, alpha: AsyncClient) -> None:
    async with AsyncClient(server.grpc_target, token=BETA, timeout=60) as beta:
        first = await beta.create("terminal", **TERMINAL)
        try:
            with pytest.raises(ResourceExhausted, match=r"over the quota of tenant 'beta': sandboxes: 2 would be held"):
                await beta.create("terminal", **TERMINAL)
            with pytest.raises(ResourceExhausted, match="max_group of 2"):
                await beta.create_group(3, "terminal", **TERMINAL)
            async with httpx.AsyncClient(base_url=server.http_url, headers={"authorization": f"Bearer {BETA}"}) as h:
                answer = await h.post("/v1/sandboxes", json={"kind": "terminal"})
                assert answer.status_code == 429 and "quota" in answer.json()["error"]["message"]
                capacity = (await h.get("/v1/capacity")).json()
            assert [t["tenant"] for t in capacity["tenants"]] == ["beta"], "a tenant sees only its own use"
            assert capacity["tenants"][0]["quota"]["max_sandboxes"] == 1
            assert len(await alpha.list()) == 0 and (await alpha.create("terminal", **TERMINAL)), "alpha is not beta"
        finally:
            await first.close()
    async with httpx.AsyncClient(base_url=server.http_url) as http:
        metrics = (await http.get("/metrics")).text
    assert 'sandbox_admission_refusals_total{reason="quota",tenant="beta"}' in metrics


async def test_healthz_answers_within_a_second_while_creates_flood_in(
    server: ServerProcess, alpha: AsyncClient, docker_client: docker.DockerClient
) -> None:
    await alpha.create_group(FITS, "terminal", **TERMINAL)
    before = _containers(docker_client)
    stop = asyncio.Event()
    refusals = 0

    async def flood() -> None:
        nonlocal refusals
        while not stop.is_set():
            try:
                await alpha.create("terminal", **TERMINAL)
            except ResourceExhausted:
                refusals += 1

    floods = [asyncio.create_task(flood()) for _ in range(8)]
    worst = 0.0
    async with httpx.AsyncClient(base_url=server.http_url, timeout=5) as http:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            started_at = time.monotonic()
            assert (await http.get("/healthz")).status_code == 200
            worst = max(worst, time.monotonic() - started_at)
            await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*floods)
    assert refusals > 0, "the flood was not refused"
    assert worst < 1.0, f"/healthz took {worst:.2f} s during the flood"
    assert _containers(docker_client) == before, "the flood started containers beyond capacity"


@pytest.fixture(autouse=True)
def _no_stray_waits(server: ServerProcess) -> Iterator[None]:
    yield
    answer = httpx.get(f"{server.http_url}/v1/capacity", headers={"authorization": f"Bearer {ADMIN}"})
    assert answer.json()["waiting"] == [], "a test left a call waiting for capacity"
