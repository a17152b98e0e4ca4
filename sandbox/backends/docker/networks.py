"""The ``internal`` network of a control plane's sandboxes: a bridge with no route out (``internal``) and no address of
the host's on it (``inhibit_ipv4``), so a sandbox reaches its peers there and nothing else, not even a host service
listening on every address (the control plane, with tokens, does). Docker gives a bridge's gateway address to the
host even for an ``internal`` network unless told not to."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import docker

from sandbox.errors import NotFound, SandboxError

INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"
"""Bridge option (Docker 20.10+): the bridge gets no IPv4 address, so the host is not reachable on it."""

Call = Callable[..., Awaitable[Any]]
"""The backend's engine call: ``call(what, fn, *args, **kwargs)``, in a thread, errors translated."""


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
            await call("replace the internal network", network.remove)
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
