"""The service starts every sandbox's instance for the sandbox's tenant (``Backend.create``'s ``tenant``, what scopes
network ``internal``), on create and on a reset (an admin's too), and keeps no warm pool of a spec with network
``internal`` (a warm instance has no tenant yet). The fake backend keeps the tenant as a label."""

from __future__ import annotations

from sandbox.backends.base import LABEL_TENANT_HASH, tenant_hash
from sandbox.models import NetworkPolicy, SandboxSpec
from sandbox.service import Principal, SandboxService

ALPHA, BETA, ADMIN = Principal("alpha"), Principal("beta"), Principal("ops", admin=True)
INTERNAL = SandboxSpec(kind="terminal", network=NetworkPolicy.INTERNAL)


async def _tenant_label(service: SandboxService, sandbox_id: str) -> str | None:
    record = await service.store.get("sandboxes", sandbox_id)
    assert record is not None
    return (await service.backend.inspect(record["instance"])).labels.get(LABEL_TENANT_HASH)


async def test_the_tenant_reaches_the_backends_create_and_a_reset_keeps_it(service: SandboxService) -> None:
    alpha = await service.create(ALPHA, INTERNAL)
    beta = await service.create(BETA, INTERNAL)
    try:
        assert await _tenant_label(service, alpha.id) == tenant_hash("alpha")
        assert await _tenant_label(service, beta.id) == tenant_hash("beta")
        await service.reset(ADMIN, alpha.id)  # the admin acts; the sandbox stays alpha's
        assert await _tenant_label(service, alpha.id) == tenant_hash("alpha")
    finally:
        await service.delete(ALPHA, alpha.id)
        await service.delete(BETA, beta.id)
        await service.instances.drain()


async def test_no_warm_pool_is_kept_for_network_internal(service: SandboxService) -> None:
    image = service.backend.image_for(INTERNAL)
    key = service.pools.add(INTERNAL, image, min=1, max=1)
    assert key not in service.pools.keys()  # noqa: SIM118 (Pools has no __contains__)
    await service.pools.refill()
    assert await service.store.items(key) == []
    # Even a queue of warm instances left by an older version is not drawn from: one has no tenant's network.
    await service.store.push(key, "in-term-left-by-an-older-version")
    made = await service.create(ALPHA, INTERNAL)
    try:
        assert await service.store.items(key) == ["in-term-left-by-an-older-version"]
        assert await _tenant_label(service, made.id) == tenant_hash("alpha")
    finally:
        await service.store.pop(key)
        await service.delete(ALPHA, made.id)
        await service.instances.drain()
