"""The per-sandbox disk limit (``Resources.disk_mb``) on Docker: ``storage_opt={"size": ...}``, which only some
storage drivers enforce. For overlay2 the engine needs its data root on XFS mounted with ``pquota``; on any other
backing file system (ext4 here) it refuses the option. A spec asking for a limit the engine cannot enforce is refused
with FailedPrecondition, naming why, before anything is made: never run without the limit it asked for."""

from __future__ import annotations

from typing import Any

from sandbox.errors import FailedPrecondition
from sandbox.models import SandboxSpec

ENGINE_REFUSAL = "storage-opt"
"""In the engine's refusal of the option (XFS mounted without ``pquota``, which the engine's info does not show)."""


def backing_filesystem(info: dict[str, Any]) -> str:
    """The storage driver's backing file system, from the engine's info (``DriverStatus`` pairs); "" if not said."""
    for pair in info.get("DriverStatus") or []:
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] == "Backing Filesystem":
            return str(pair[1])
    return ""


def unenforceable(info: dict[str, Any]) -> str | None:
    """Why this engine cannot enforce a disk limit, or None when it can (overlay2 on XFS: the engine still
    refuses the option at create when XFS is mounted without ``pquota``, see ``refused``)."""
    driver, backing = str(info.get("Driver") or ""), backing_filesystem(info)
    if driver == "overlay2" and backing == "xfs":
        return None
    return (
        f"the engine's storage driver is {driver or 'unknown'} on {backing or 'an unknown file system'}, and Docker "
        "enforces a container's disk size (--storage-opt size) for overlay2 only on XFS mounted with pquota"
    )


def check(spec: SandboxSpec, info: dict[str, Any]) -> None:
    """FailedPrecondition when ``spec`` asks for a disk limit the engine cannot enforce."""
    if spec.resources.disk_mb is not None and (why := unenforceable(info)) is not None:
        raise FailedPrecondition(f"resources.disk_mb cannot be enforced on this Docker engine: {why}")


def run_params(spec: SandboxSpec) -> dict[str, Any]:
    """The run parameter of the limit (none without one)."""
    disk_mb = spec.resources.disk_mb
    return {} if disk_mb is None else {"storage_opt": {"size": f"{disk_mb}M"}}


def refused(message: str) -> FailedPrecondition:
    """The engine's own refusal of the option (an XFS data root without pquota), as the refusal of the spec."""
    return FailedPrecondition(f"resources.disk_mb cannot be enforced on this Docker engine: {message}")
