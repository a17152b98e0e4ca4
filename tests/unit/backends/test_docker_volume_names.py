"""Docker volumes are per tenant (``sandbox/backends/docker/volumes.py``): one tenant's volume ``data`` is not
another's, the name carries the tenant's hash (never the tenant), the labels let clean-up by owner find it, and a
caller with no tenant keeps the unscoped name volumes had before. And no warm pool is kept for a spec with volumes
(a warm instance has no tenant yet), nor is a queue of one drawn from (the service, on the fake backend)."""

from __future__ import annotations

import re

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, LABEL_TENANT_HASH, MANAGED_BY, tenant_hash
from sandbox.backends.docker.volumes import Volumes, copy_command, volume_name
from sandbox.models import SandboxSpec, VolumeMount
from sandbox.service import Principal, SandboxService

DOCKER_VOLUME_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")
"""What the engine accepts as a volume's name."""
LABELS = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: "plane-1"}


def _volumes() -> Volumes:
    async def never(*args: object, **kwargs: object) -> dict[str, object]:
        raise AssertionError("no engine call in these tests")

    return Volumes(lambda: None, "plane-1", LABELS, never, never, uid=1000)  # type: ignore[arg-type,return-value]


def test_two_tenants_volumes_of_one_name_are_two_volumes() -> None:
    alpha, beta = volume_name("plane-1", "data", "alpha"), volume_name("plane-1", "data", "beta")
    assert alpha == f"sbxvol-plane-1-{tenant_hash('alpha')}-data"
    assert beta == f"sbxvol-plane-1-{tenant_hash('beta')}-data"
    assert alpha != beta
    assert volume_name("plane-1", "data", "alpha") == alpha  # stable: the same volume on every use
    assert volume_name("plane-2", "data", "alpha") != alpha  # another control plane on the engine: its own


def test_the_name_carries_the_tenants_hash_never_the_tenant() -> None:
    tenant = "Team A / évaluations: " + "x" * 300  # any character, any length
    name = volume_name("plane-1", "data", tenant)
    assert tenant_hash(tenant) in name and "Team" not in name
    longest = volume_name("o" * 63, "v" * 63, tenant)
    assert DOCKER_VOLUME_NAME.fullmatch(name) and DOCKER_VOLUME_NAME.fullmatch(longest)


def test_no_tenant_keeps_the_unscoped_name() -> None:
    assert volume_name("plane-1", "data", None) == "sbxvol-data"
    assert _volumes().name_for("data", None) == "sbxvol-data"


def test_a_tenants_volume_is_labelled_with_its_owner_and_tenant_hash() -> None:
    volumes = _volumes()
    assert volumes.labels_for("alpha") == {**LABELS, LABEL_TENANT_HASH: tenant_hash("alpha")}
    assert volumes.labels_for(None) == LABELS  # unscoped: the owner's, as before


def test_the_copy_command_reads_the_old_volume_and_writes_the_tenants() -> None:
    old, new = "sbxvol-data", volume_name("plane-1", "data", "alpha")
    command = copy_command(old, new, "sandbox/terminal:latest")
    assert f"-v {old}:/from:ro" in command and f"-v {new}:/to" in command and "--network none" in command


async def test_no_warm_pool_is_kept_for_a_spec_with_volumes(service: SandboxService) -> None:
    spec = SandboxSpec(kind="terminal", volumes=(VolumeMount(name="data", path="/workspace/data"),))
    key = service.pools.add(spec, service.backend.image_for(spec), min=1, max=1)
    assert key not in service.pools.keys()  # noqa: SIM118 (Pools has no __contains__)
    await service.pools.refill()
    assert await service.store.items(key) == []
    # A queue left by an older version is not drawn from either: its instance mounts no tenant's volume.
    await service.store.push(key, "in-term-left-by-an-older-version")
    made = await service.create(Principal("alpha"), spec)
    try:
        assert await service.store.items(key) == ["in-term-left-by-an-older-version"]
        record = await service.store.get("sandboxes", made.id)
        assert record is not None and record["instance"] != "in-term-left-by-an-older-version"
        labels = (await service.backend.inspect(record["instance"])).labels
        assert labels.get(LABEL_TENANT_HASH) == tenant_hash("alpha")  # started for its tenant
    finally:
        await service.store.pop(key)
        await service.delete(Principal("alpha"), made.id)
        await service.instances.drain()
