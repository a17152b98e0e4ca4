"""Network ``internal`` is one bridge per tenant (``sandbox/backends/docker/networks.py``): one tenant's internal
sandboxes reach each other on it, a reset keeps the sandbox on it, and it goes with the tenant's last sandbox (the
other tenants' networks stay). Real containers, through the service, on a control plane (owner) of their own
(``plane``, in ``tests/docker/conftest.py``)."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, LABEL_TENANT_HASH, MANAGED_BY, tenant_hash
from sandbox.errors import NotFound
from sandbox.models import Exec, NetworkPolicy, SandboxSpec
from sandbox.service import Principal
from tests.conftest import TEST_LABEL
from tests.docker.conftest import Plane
from tests.docker.test_containment import _CONNECT, _LISTEN

pytestmark = pytest.mark.docker
SPEC = SandboxSpec(kind="terminal", labels=TEST_LABEL, network=NetworkPolicy.INTERNAL)
ALPHA, BETA = Principal("alpha"), Principal("beta")


async def test_one_tenants_internal_sandboxes_reach_each_other_on_its_own_network(plane: Plane) -> None:
    port, name = 47000 + secrets.randbelow(1000), f"sbx-{secrets.token_hex(4)}"
    first, second = await asyncio.gather(plane.service.create(ALPHA, SPEC), plane.service.create(ALPHA, SPEC))
    network = plane.network_of("alpha")
    assert await plane.networks_of_sandbox(first.id) == [network]
    assert await plane.networks_of_sandbox(second.id) == [network]
    labels = plane.networks()[network]
    assert labels[LABEL_OWNER] == plane.owner and labels[LABEL_MANAGED_BY] == MANAGED_BY
    assert labels[LABEL_TENANT_HASH] == tenant_hash("alpha")
    assert "alpha" not in network  # the tenant's hash names it, never the tenant itself

    start = ["sh", "-c", 'python3 -c "$1" "$2" "$3" >/dev/null 2>&1 &', "sh", _LISTEN, str(port), name]
    await plane.service.exec(ALPHA, first.id, Exec(cmd=start, keep_background=True))
    listening = Exec(cmd="for i in $(seq 50); do test -e /tmp/listening && exit 0; sleep 0.1; done; exit 1")
    assert (await plane.service.exec(ALPHA, first.id, listening)).exit_code == 0
    connect = Exec(cmd=["python3", "-c", _CONNECT, "tcp", f"{await plane.address_of(first.id)}:{port}"])
    reached = await plane.service.exec(ALPHA, second.id, connect)
    assert reached.stdout.startswith("connected"), reached.stdout

    # A reset starts the sandbox's new instance for its tenant: on the same network, the old one's removal
    # leaves the network to the sandboxes still on it.
    await plane.service.reset(ALPHA, second.id)
    await plane.service.instances.drain()
    assert await plane.networks_of_sandbox(second.id) == [network]
    assert network in plane.networks()


async def test_a_tenants_internal_network_goes_with_its_last_sandbox(plane: Plane) -> None:
    first, second, other = await asyncio.gather(
        plane.service.create(ALPHA, SPEC), plane.service.create(ALPHA, SPEC), plane.service.create(BETA, SPEC)
    )
    alpha, beta = plane.network_of("alpha"), plane.network_of("beta")
    assert {alpha, beta} <= set(plane.networks())
    await plane.delete(ALPHA, first.id)
    assert {alpha, beta} <= set(plane.networks()), "alpha's network went while a sandbox of alpha's was on it"
    await plane.delete(ALPHA, second.id)
    assert alpha not in plane.networks(), "alpha's network outlived its last sandbox"
    assert beta in plane.networks(), "another tenant's network went with alpha's last sandbox"
    await plane.delete(BETA, other.id)
    assert plane.networks() == {}


async def test_a_create_whose_network_another_replica_just_removed_makes_it_again(plane: Plane) -> None:
    """Two replicas of one owner: one removes a tenant's network (its last sandbox went) between the other's check
    of the network and its container's start. The start finds no network, makes it again and goes on."""
    networks = plane.backend._networks
    async with networks.joining(NetworkPolicy.INTERNAL, "alpha") as name:
        assert name == plane.network_of("alpha")
        plane.client.networks.get(name).remove()  # the other replica's removal, in that moment
        labels = {**plane.backend.owner_labels(), **TEST_LABEL}

        container = plane.client.containers.create("sandbox/terminal:latest", ["sleep", "60"], network=name,
                                                   labels=labels)  # fmt: skip

        async def start() -> None:
            await plane.backend._call("start the container", container.start)  # the backend's, errors translated

        with pytest.raises(NotFound):
            await start()  # the engine's answer without the network
        await networks.again_if_gone(name, "alpha", start)
    container.reload()
    assert container.status == "running" and list(container.attrs["NetworkSettings"]["Networks"]) == [name]
    assert plane.networks()[name][LABEL_TENANT_HASH] == tenant_hash("alpha")
