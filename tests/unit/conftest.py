"""Fixtures for the API tests: one service layer over the in-package fake backend, per test module."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from sandbox.backends.config import FakeConfig
from sandbox.backends.fake import FakeBackend
from sandbox.service import SandboxService
from sandbox.store import EmbeddedStore

ALPHA_TOKEN = "alpha-token-0123456789"
BETA_TOKEN = "beta-token-0123456789ab"
ADMIN_TOKEN = "admin-token-0123456789a"
TOKENS: dict[str, object] = {ALPHA_TOKEN: "alpha", BETA_TOKEN: "beta", ADMIN_TOKEN: {"tenant": "ops", "admin": True}}
LOGGER = logging.getLogger("sandbox.test.api")


@pytest.fixture(scope="module")
def socket_root() -> Iterator[str]:
    root = tempfile.mkdtemp(prefix="sbxf-", dir="/tmp")
    yield root
    leftovers = os.listdir(root)
    shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"sandboxes left behind: {leftovers}"


@pytest_asyncio.fixture(scope="module")
async def service(socket_root: str) -> AsyncIterator[SandboxService]:
    store = await EmbeddedStore.open(None, logger=LOGGER)
    backend = FakeBackend(FakeConfig(socket_root=socket_root))
    service = SandboxService(backend, store, logger=LOGGER)
    yield service
    await service.close()
    await backend.close()  # the fake's sandboxes are processes of this one: they end with it
    await store.close()
