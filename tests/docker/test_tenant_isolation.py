"""Tenants stay apart on Docker, through real containers and the service: two tenants' sandboxes that mount a volume
of the same name mount two volumes (``sandbox/backends/docker/volumes.py``), also on network ``internal``. That one
tenant's internal sandbox cannot reach another's is
``test_containment.py::test_internal_sandboxes_of_two_tenants_do_not_reach_each_other`` (a tenant's own peers
reaching each other: ``test_tenant_networks.py``). A volume made before volumes were per tenant is left as it was,
with a warning. Network ``internal`` or none only, on a control plane (owner) of its own (``plane``, in
``tests/docker/conftest.py``)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, LABEL_TENANT_HASH, MANAGED_BY, tenant_hash
from sandbox.backends.docker.volumes import volume_name
from sandbox.models import Exec, NetworkPolicy, SandboxSpec, VolumeMount
from sandbox.service import Principal
from sandbox.service.records import new_instance_id
from tests.conftest import OWNER, TEST_LABEL
from tests.docker.conftest import Plane

pytestmark = pytest.mark.docker
ALPHA, BETA = Principal("alpha"), Principal("beta")
PLANE_OWNER = f"{OWNER}-tnet"  # the ``plane`` fixture's owner
VOLUMES_LOGGER = "sandbox.backends.docker.volumes"


@pytest.fixture
def volumes_removed(docker_client: docker.DockerClient) -> Iterator[None]:
    """The plane's volumes, removed at the end. Requested before ``plane``, so it ends after ``plane`` has removed
    the plane's containers (a volume in use cannot be removed)."""
    yield
    for volume in docker_client.volumes.list(filters={"label": f"{LABEL_OWNER}={PLANE_OWNER}"}):
        volume.remove(force=True)


def _spec(volume: str, network: NetworkPolicy = NetworkPolicy.NONE) -> SandboxSpec:
    mount = VolumeMount(name=volume, path="/workspace/shared")
    return SandboxSpec(kind="terminal", labels=TEST_LABEL, network=network, volumes=(mount,))


async def _run(plane: Plane, principal: Principal, sandbox_id: str, cmd: str | list[str]) -> str:
    result = await plane.service.exec(principal, sandbox_id, Exec(cmd=cmd))
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def test_another_tenants_volume_of_the_same_name_is_out_of_reach(volumes_removed: None, plane: Plane) -> None:
    volume = f"data-{secrets.token_hex(3)}"
    spec = _spec(volume, NetworkPolicy.INTERNAL)  # the tenants' sandboxes on their internal networks
    alpha, beta = await asyncio.gather(plane.service.create(ALPHA, spec), plane.service.create(BETA, spec))

    # alpha's file is in alpha's volume alone, and beta's write lands in beta's.
    await _run(plane, ALPHA, alpha.id, "echo alpha-only > /workspace/shared/secret.txt")
    assert await _run(plane, BETA, beta.id, "ls -A /workspace/shared") == ""
    await _run(plane, BETA, beta.id, "echo beta > /workspace/shared/beta.txt")
    assert await _run(plane, ALPHA, alpha.id, "ls -A /workspace/shared") == "secret.txt\n"
    for tenant in ("alpha", "beta"):
        found = plane.client.volumes.get(volume_name(plane.owner, volume, tenant))
        labels = found.attrs["Labels"]
        assert labels[LABEL_OWNER] == plane.owner and labels[LABEL_MANAGED_BY] == MANAGED_BY
        assert labels[LABEL_TENANT_HASH] == tenant_hash(tenant)
    with pytest.raises(docker.errors.NotFound):  # no unscoped one was made
        plane.client.volumes.get(volume_name(plane.owner, volume, None))


async def test_a_volume_from_before_tenants_is_left_as_it_was_with_a_warning(
    volumes_removed: None, plane: Plane, caplog: pytest.LogCaptureFixture
) -> None:
    """``sbxvol-<name>`` made before volumes were per tenant (here: by an instance with no tenant, which still
    mounts it) may hold any tenant's files: a tenant asking for ``<name>`` gets an empty volume of its own, the old
    one keeps its files, and one warning names it, the tenant's volume and the copy command."""
    volume = f"old-{secrets.token_hex(3)}"
    spec = _spec(volume)
    legacy = new_instance_id(spec.kind)
    await plane.backend.create(legacy, spec)  # no tenant: the unscoped volume, as before
    try:
        wrote = await plane.backend.agent(legacy).exec("echo from-before > /workspace/shared/old.txt")
        assert wrote.exit_code == 0, wrote.stderr
    finally:
        await plane.backend.destroy(legacy)
    old = volume_name(plane.owner, volume, None)
    assert plane.client.volumes.get(old).attrs["Labels"][LABEL_OWNER] == plane.owner

    with caplog.at_level(logging.WARNING, logger=VOLUMES_LOGGER):
        alpha, second = await asyncio.gather(plane.service.create(ALPHA, spec), plane.service.create(BETA, spec))
    assert await _run(plane, ALPHA, alpha.id, "ls -A /workspace/shared") == ""
    assert await _run(plane, BETA, second.id, "ls -A /workspace/shared") == ""
    warnings = [r.getMessage() for r in caplog.records if r.name == VOLUMES_LOGGER and old in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, though two tenants made their own volume of that name
    assert "docker run --rm --network none" in warnings[0] and f"-v {old}:/from:ro" in warnings[0]

    # The old volume is untouched: its file is still there (read by an instance with no tenant, which mounts it).
    reader = new_instance_id(spec.kind)
    await plane.backend.create(reader, spec)
    try:
        assert await plane.backend.agent(reader).read_file("/workspace/shared/old.txt") == b"from-before\n"
    finally:
        await plane.backend.destroy(reader)
