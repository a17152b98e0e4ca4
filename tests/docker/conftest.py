"""Fixtures shared by the Docker tests: ``plane``, a control plane's service (backend, store, service) in this
process, on an owner of its own, for the tests of per-tenant internal networks (``test_tenant_networks.py``,
``test_containment.py``)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import docker
import pytest_asyncio

from sandbox.backends.base import LABEL_OWNER, tenant_hash
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.service import Principal, SandboxService
from sandbox.store import EmbeddedStore
from tests.conftest import OWNER, RUN_ID, owned_by

LOGGER = logging.getLogger("sandbox.test.plane")


@dataclass
class Plane:
    owner: str
    backend: DockerBackend
    store: EmbeddedStore
    service: SandboxService
    client: docker.DockerClient

    def network_of(self, tenant: str) -> str:
        return f"sbx-internal-{self.owner}-{tenant_hash(tenant)}"

    def networks(self) -> dict[str, dict[str, str]]:
        """This owner's networks: name -> labels."""
        found = self.client.networks.list(filters={"label": f"{LABEL_OWNER}={self.owner}"})
        return {n.name: dict(n.attrs.get("Labels") or {}) for n in found}

    async def networks_of_sandbox(self, sandbox_id: str) -> list[str]:
        record = await self.store.get("sandboxes", sandbox_id)
        assert record is not None
        container = self.client.containers.get(self.backend.container_name(record["instance"]))
        return list(container.attrs["NetworkSettings"]["Networks"])

    async def address_of(self, sandbox_id: str) -> str:
        record = await self.store.get("sandboxes", sandbox_id)
        assert record is not None
        container = self.client.containers.get(self.backend.container_name(record["instance"]))
        (network,) = container.attrs["NetworkSettings"]["Networks"].values()
        return str(network["IPAddress"])

    async def delete(self, principal: Principal, sandbox_id: str) -> None:
        """Delete, and wait for the instance's removal (the service removes it in the background)."""
        await self.service.delete(principal, sandbox_id)
        await self.service.instances.drain()


@pytest_asyncio.fixture
async def plane(docker_client: docker.DockerClient) -> AsyncIterator[Plane]:
    """A service over a Docker backend of owner ``<run owner>-tnet``; ``owned_by`` removes that owner's containers
    and networks at the end."""
    owner, sockets = f"{OWNER}-tnet", f"/run/sbx-test-{RUN_ID}-tnet"
    with owned_by(docker_client, owner, sockets):
        backend = DockerBackend(DockerConfig(owner=owner, socket_root=sockets))
        store = await EmbeddedStore.open(None, logger=LOGGER)
        service = SandboxService(backend, store, logger=LOGGER)
        try:
            yield Plane(owner, backend, store, service, docker_client)
        finally:
            await service.close()
            await store.close()
            await backend.close()
