"""The named volumes a spec mounts (``spec.volumes``), one set per tenant.

A volume is made on first use and kept after its sandboxes go (it is how a tenant's sandboxes share files, also
across time). One tenant's volume ``data`` is ``sbxvol-<owner>-<tenant hash>-data`` (``base.tenant_hash``: 12 hex
digits of the tenant's SHA-256, never the raw tenant), labelled with the owner (clean-up by owner finds it) and the
tenant hash; another tenant's ``data`` is another volume. An instance started with no tenant (a caller outside the
service) mounts the unscoped ``sbxvol-data``, as every instance did before volumes were per tenant.

Warm pools: a warm instance is started before any tenant claims it, so it could only mount the unscoped volume,
another tenant's files. Specs with volumes are therefore never kept warm (``service.pools``, as for network
``internal``); restored snapshots, resets and recoveries start their instance for the sandbox's tenant, so they
mount its volumes; a restart in place keeps the container and so its mounts.

Volumes made before they were per tenant: ``sbxvol-<name>`` was every tenant's volume ``<name>``, so its files may
be any tenant's, or several tenants'. It is left as it was: neither handed to the first tenant that asks for
``<name>`` (that would give it the others' files) nor removed (that would lose them). A tenant's first use of
``<name>`` makes its own empty volume, and when the old one exists (made by this owner) the backend logs once a
warning naming both and how an operator copies the files over (``docs/sandboxes.md``, "Shared volumes").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import docker
from docker.models.containers import Container

from sandbox.aio import settled
from sandbox.backends.base import LABEL_OWNER, LABEL_TENANT_HASH, tenant_hash
from sandbox.backends.docker.teardown import run_to_exit
from sandbox.errors import BackendError, NotFound, SandboxError

VOLUME_PREFIX = "sbxvol-"
LOGGER = logging.getLogger(__name__)

Call = Callable[..., Awaitable[Any]]
"""The backend's engine call: ``call(what, fn, *args, kind=..., **kwargs)`` (``engine_client.EngineCalls``)."""
RunToExit = Callable[[str, Callable[[], dict[str, Any]]], Awaitable[dict[str, Any]]]
"""The backend's ``_tear_down``: a helper container's run to its exit, in the teardown lane when the engine needs it."""


def volume_name(owner: str, name: str, tenant: str | None) -> str:
    """The engine's name of ``tenant``'s volume ``name`` under control plane ``owner``; unscoped for no tenant."""
    if tenant is None:
        return f"{VOLUME_PREFIX}{name}"
    return f"{VOLUME_PREFIX}{owner}-{tenant_hash(tenant)}-{name}"


def copy_command(old: str, new: str, image: str) -> str:
    """The command that copies an old unscoped volume's files into a tenant's volume (for the warning)."""
    return f"docker run --rm --network none -v {old}:/from:ro -v {new}:/to {image} cp -a /from/. /to/"


class Volumes:
    """The volumes of one owner's sandboxes on one engine: made (and handed to the sandbox user) on first use."""

    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        owner: str,
        labels: dict[str, str],
        call: Call,
        run_to_exit: RunToExit,
        *,
        uid: int,
    ) -> None:
        self._client, self._owner, self._labels, self._call = client, owner, labels, call
        self._run_to_exit, self._uid = run_to_exit, uid
        self._checked: set[str] = set()
        """The unscoped names a tenant's first use looked for an old volume of (once each per process)."""

    def name_for(self, name: str, tenant: str | None) -> str:
        return volume_name(self._owner, name, tenant)

    def labels_for(self, tenant: str | None) -> dict[str, str]:
        return {**self._labels, **({LABEL_TENANT_HASH: tenant_hash(tenant)} if tenant is not None else {})}

    async def ensure(self, name: str, tenant: str | None, image: str) -> str:
        """``tenant``'s volume ``name``, made if missing (owned by the sandbox user); its engine name."""
        full = self.name_for(name, tenant)
        try:
            await self._call(f"inspect volume {name}", self._client().volumes.get, full)
            return full
        except NotFound:
            pass
        if tenant is not None:
            await self._warn_if_old(name, full, image)
        client = self._client()
        await self._call(f"create volume {name}", client.volumes.create, name=full, labels=self.labels_for(tenant))
        # A new volume is owned by root; hand it to the sandbox user once, with a throwaway container.
        chown: Container = await settled(
            self._call(
                f"prepare volume {name}",
                client.containers.create,
                kind="create",
                image=image,
                command=["chown", f"{self._uid}:{self._uid}", "/volume"],
                entrypoint=[],
                user="0:0",
                network_mode="none",
                volumes={full: {"bind": "/volume", "mode": "rw"}},
                labels={**self._labels, "sandbox.role": "volume-init"},
            )
        )
        try:
            result = await self._run_to_exit(f"prepare volume {name}", partial(run_to_exit, chown, timeout=60))
            if result.get("StatusCode") != 0:
                raise BackendError(f"could not hand volume {name} to uid {self._uid}: exit {result.get('StatusCode')}")
        finally:
            await asyncio.shield(self._call(f"prepare volume {name}", chown.remove, kind="remove", force=True))
        return full

    async def _warn_if_old(self, name: str, full: str, image: str) -> None:
        """Log once that this owner's unscoped ``sbxvol-<name>`` from before volumes were per tenant is left alone."""
        old = volume_name(self._owner, name, None)
        if old in self._checked:
            return
        self._checked.add(old)  # before the engine is asked: two tenants' first uses at once log one warning
        try:
            volume = await self._call(f"inspect volume {name}", self._client().volumes.get, old)
        except NotFound:
            return
        except BaseException as e:  # the engine failed (or the create was cancelled): ask on the next first use
            self._checked.discard(old)
            if isinstance(e, SandboxError):
                return  # only a warning hangs on it: the tenant's volume is still made
            raise
        if (volume.attrs.get("Labels") or {}).get(LABEL_OWNER) != self._owner:
            return  # another control plane's, or a caller's outside the platform: not ours to point at
        LOGGER.warning(
            "volume %s was made before volumes were per tenant and may hold any tenant's files: it is left as it "
            "was, and each tenant asking for %r now gets a volume of its own, %s (this one: %s). To give a tenant "
            "the old files, an operator copies them into its volume while no sandbox runs on either: %s",
            old,
            name,
            f"{VOLUME_PREFIX}{self._owner}-<tenant hash>-{name}",
            full,
            copy_command(old, full, image),
        )
