"""The ``internal`` networks of a control plane's sandboxes, one per tenant.

Each is a bridge with no route out (``internal``) and no address of the host's on it (``inhibit_ipv4``), so a
sandbox reaches its tenant's peers there and nothing else, not even a host service listening on every address (the
control plane, with tokens, does). Docker gives a bridge's gateway address to the host even for an ``internal``
network unless told not to.

One network per tenant: ``sbx-internal-<owner>-<tenant hash>`` (``base.tenant_hash``: 12 hex digits of the tenant's
SHA-256, never the raw tenant, which may be long or hold any character), labelled with the owner (clean-up by owner
finds it) and the tenant hash. Internal sandboxes of two tenants are on two bridges and cannot reach each other. An
instance started with no tenant (a caller outside the service) joins the owner's unscoped ``sbx-internal-<owner>``.

Warm pools: a warm instance is started before any tenant claims it, so it could only sit on some other network
and be moved at claim time, which would put an engine call on the claim's fast path. Instead, specs with network
``internal`` are never kept warm (``service.pools``: such a pool is refused; a create always starts a new instance
for its tenant). Restored snapshots, resets and recoveries start their instance for the sandbox's tenant, so they
keep its network; a restart in place keeps the container and so its network.

A tenant's network is removed when its last container goes (``release``, after every ``destroy``): by then no
container, running or only created, names it. Within one backend a lock orders that removal against the creates
that are about to join the network. Across replicas of one owner on one engine, a removal can still meet another
replica's create in the moment between its network check and its container's create: that create finds no network,
makes it again and
tries once more (``again_if_gone``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import docker

from sandbox.backends.base import LABEL_OWNER, LABEL_TENANT_HASH, tenant_hash
from sandbox.errors import NotFound, SandboxError
from sandbox.models import NetworkPolicy

INTERNAL_NETWORK = "sbx-internal"
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"
"""Bridge option (Docker 20.10+): the bridge gets no IPv4 address, so the host is not reachable on it."""

T = TypeVar("T")
Call = Callable[..., Awaitable[Any]]
"""The backend's engine call: ``call(what, fn, *args, kind=..., **kwargs)``, in a thread through the engine gate,
errors translated (``engine_client.EngineCalls``)."""


class InternalNetworks:
    """The internal networks of one owner's sandboxes on one engine: made on first use, removed after last use."""

    def __init__(self, client: Callable[[], docker.DockerClient], owner: str, labels: dict[str, str], call: Call):
        self._client, self._owner, self._labels, self._call = client, owner, labels, call
        self._joining: Counter[str] = Counter()
        """Network name -> creates under way that will join it (a removal waits until there are none)."""
        self._locks: dict[str, asyncio.Lock] = {}
        """Network name -> what orders its making and its removal (kept: one small lock per tenant seen)."""
        self._unscoped = f"{INTERNAL_NETWORK}-{owner}"
        self._ours = re.compile(re.escape(self._unscoped) + r"(-[0-9a-f]{12})?")

    def name_for(self, tenant: str | None) -> str:
        return self._unscoped if tenant is None else f"{self._unscoped}-{tenant_hash(tenant)}"

    def is_ours(self, name: str) -> bool:
        return self._ours.fullmatch(name) is not None

    def _labels_for(self, tenant: str | None) -> dict[str, str]:
        return {**self._labels, **({LABEL_TENANT_HASH: tenant_hash(tenant)} if tenant is not None else {})}

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    @contextlib.asynccontextmanager
    async def joining(self, policy: NetworkPolicy, tenant: str | None) -> AsyncIterator[str | None]:
        """For network ``internal``, the tenant's network, made if missing and not removed by this backend until the
        block ends (the container that joins it is made, and started, within it); for any other policy, None."""
        if policy is not NetworkPolicy.INTERNAL:
            yield None
            return
        name = self.name_for(tenant)
        async with self._lock(name):
            await ensure_internal_network(self._client(), name, self._labels_for(tenant), self._call)
            self._joining[name] += 1
        try:
            yield name
        finally:
            self._joining[name] -= 1
            if not self._joining[name]:
                del self._joining[name]

    async def again_if_gone(self, name: str | None, tenant: str | None, step: Callable[[], Awaitable[T]]) -> T:
        """``step()`` (a container's create or start, on network ``name``), once more after making the network
        again if another replica of this owner removed it in the moment before (the engine finds no network)."""
        try:
            return await step()
        except NotFound as e:
            if name is None or "network" not in e.message:
                raise
        async with self._lock(name):
            await ensure_internal_network(self._client(), name, self._labels_for(tenant), self._call)
        return await step()

    async def release(self, container: dict[str, Any]) -> None:
        """Remove the internal networks a removed ``container`` (its attributes) was on, unless a container of any
        state names one or a create is about to join it. Best effort: a network left is removed after its next use."""
        names = ((container.get("NetworkSettings") or {}).get("Networks") or {}).keys()
        for name in (n for n in names if self.is_ours(n)):
            async with self._lock(name):
                if self._joining[name]:
                    continue
                try:
                    await self._remove_if_unused(name)
                except SandboxError as e:  # in use after all (another replica's sandbox), or the engine failed
                    logging.getLogger(__name__).info("internal network %s kept: %s", name, e.message)

    async def _remove_if_unused(self, name: str) -> None:
        client = self._client()
        filters = {"network": name}
        if await self._call("list the network's containers", client.api.containers, all=True, filters=filters):
            return
        for network in await self._call("list networks", client.networks.list, names=[name]):
            if network.name == name and (network.attrs.get("Labels") or {}).get(LABEL_OWNER) == self._owner:
                with contextlib.suppress(NotFound):
                    await self._call(f"remove network {name}", network.remove, kind="remove")


async def ensure_internal_network(client: docker.DockerClient, name: str, labels: dict[str, str], call: Call) -> str:
    """The network ``name``, made if missing. An older one made without ``inhibit_ipv4`` is replaced once no
    container uses it (until then it is used, with a warning: its sandboxes must keep reaching each other)."""
    found = [n for n in await call("list networks", client.networks.list, names=[name]) if n.name == name]
    for network in found:
        await call("inspect the internal network", network.reload)
        if network.attrs.get("Options", {}).get(INHIBIT_IPV4) == "true":
            return name
        if network.attrs.get("Containers"):
            logging.getLogger(__name__).warning(
                "network %s gives the host an address its sandboxes can reach; it is replaced once unused", name
            )
            return name
        try:
            await call("replace the internal network", network.remove, kind="remove")
        except NotFound:
            pass
        except SandboxError:  # a sandbox joined it meanwhile: keep it, as above
            return name
    await call(
        "create the internal network",
        client.networks.create,
        name,
        driver="bridge",
        internal=True,
        options={INHIBIT_IPV4: "true"},
        labels=labels,
    )
    return name
