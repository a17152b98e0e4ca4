"""Fixtures for the API tests: one service layer over the in-package fake backend, per test module,
behind a real ``grpc.aio`` server on 127.0.0.1 and an in-process (ASGI) REST app. The service records no
trajectories unless its module sets ``RECORD_TRAJECTORIES = True`` (then: to a fresh directory)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio

from sandbox.api.grpc.server import bind_grpc_server
from sandbox.api.rest import create_app
from sandbox.client import AsyncClient
from sandbox.service import SandboxService, TokenRegistry
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_backend import FakeBackend, FakeConfig
from sandbox.trajectories import LocalTrajectoryStore
from tests.unit.snapshot_fake import SnapshottingFake

ALPHA_TOKEN = "alpha-token-0123456789"
BETA_TOKEN = "beta-token-0123456789ab"
ADMIN_TOKEN = "admin-token-0123456789a"
TOKENS: dict[str, object] = {ALPHA_TOKEN: "alpha", BETA_TOKEN: "beta", ADMIN_TOKEN: {"tenant": "ops", "admin": True}}
ALPHA = {"authorization": f"Bearer {ALPHA_TOKEN}"}
BETA = {"authorization": f"Bearer {BETA_TOKEN}"}
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
"""The REST headers of each tenant's token."""
LOGGER = logging.getLogger("sandbox.test.api")


@pytest.fixture(scope="module")
def socket_root() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="sbxf-", dir="/tmp")
    yield root
    leftovers = os.listdir(root)
    shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"sandboxes left behind: {leftovers}"


@pytest.fixture(scope="module")
def trajectories(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> LocalTrajectoryStore | None:
    """Where the module's service records trajectories: a fresh directory if the module sets
    ``RECORD_TRAJECTORIES = True``, else nowhere."""
    if not getattr(request.module, "RECORD_TRAJECTORIES", False):
        return None
    return LocalTrajectoryStore(tmp_path_factory.mktemp("trajectories"))


@pytest_asyncio.fixture(scope="module")
async def service(socket_root: str, trajectories: LocalTrajectoryStore | None) -> AsyncIterator[SandboxService]:
    store = await EmbeddedStore.open(None, logger=LOGGER)
    backend = FakeBackend(FakeConfig(socket_root=socket_root))
    service = SandboxService(backend, store, logger=LOGGER, trajectories=trajectories)
    yield service
    await service.close()
    await backend.close()  # the fake's sandboxes are processes of this one: they end with it
    await store.close()


@pytest_asyncio.fixture(scope="module")
async def target(service: SandboxService) -> AsyncIterator[str]:
    """The gRPC address of the module's service."""
    server, port = await bind_grpc_server(
        service, TokenRegistry.from_mapping(TOKENS), host="127.0.0.1", port=0, logger=LOGGER
    )
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest_asyncio.fixture(scope="module")
async def alpha(target: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(target, token=ALPHA_TOKEN, timeout=60) as client:
        yield client


@pytest_asyncio.fixture(scope="module")
async def beta(target: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(target, token=BETA_TOKEN, timeout=60) as client:
        yield client


@pytest_asyncio.fixture(scope="module")
async def admin(target: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(target, token=ADMIN_TOKEN, timeout=60) as client:
        yield client


@pytest_asyncio.fixture(scope="module")
async def api(service: SandboxService) -> AsyncIterator[httpx.AsyncClient]:
    """The REST skin of the module's service, in-process."""
    app = create_app(service, TokenRegistry.from_mapping(TOKENS), logger=LOGGER)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=60) as client:
        yield client


@pytest.fixture
def fake_roots() -> Iterator[tuple[str, str]]:
    """Fresh directories for a snapshotting fake's sockets and images; no sandbox may be left behind in them."""
    sockets = tempfile.mkdtemp(prefix="sbxs-", dir="/tmp")
    images = tempfile.mkdtemp(prefix="sbxi-", dir="/tmp")
    yield sockets, images
    leftovers = os.listdir(sockets)
    for root in (sockets, images):
        shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"sandboxes left behind: {leftovers}"


@pytest_asyncio.fixture
async def fake(fake_roots: tuple[str, str]) -> AsyncIterator[SnapshottingFake]:
    """The fake backend able to snapshot (tests/unit/snapshot_fake.py)."""
    backend = SnapshottingFake(FakeConfig(socket_root=fake_roots[0]), fake_roots[1])
    yield backend
    await backend.close()
