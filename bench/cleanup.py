"""Removal of everything one benchmark run created, found by its owner labels only (never by name or image)."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from functools import partial

from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.backends.docker.teardown import TeardownLane

TEARDOWNS = TeardownLane()
"""The benchmark's removals take turns with the platform's: two at once can deadlock Docker before 23 (teardown.py)."""


def owner_filters(owner: str) -> list[str]:
    return ["--filter", f"label={LABEL_MANAGED_BY}={MANAGED_BY}", "--filter", f"label={LABEL_OWNER}={owner}"]


def _docker(args: Sequence[str]) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=600)
    return done.stdout


def _ids(args: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(_docker(args).split()))


def remove_containers(containers: Sequence[str]) -> None:
    """``docker rm -f -v`` of each, one per turn of the host's teardown lane (a control plane still running takes
    its turns between them); blocking."""
    for container in containers:
        TEARDOWNS.run_sync(partial(_docker, ["rm", "-f", "-v", container]))


def remove_owned(owner: str) -> dict[str, int]:
    """Remove the containers, then images (snapshots), volumes and networks labelled with ``owner``; blocking.

    Returns how many of each were found. Errors are not raised: this runs in ``finally`` blocks.
    """
    filters = owner_filters(owner)
    containers = _ids(["ps", "-aq", "--no-trunc", *filters])
    remove_containers(containers)
    images = _ids(["images", "-q", "--no-trunc", *filters])
    if images:
        _docker(["rmi", "-f", *images])
    volumes = _ids(["volume", "ls", "-q", *filters])
    if volumes:
        _docker(["volume", "rm", "-f", *volumes])
    networks = _ids(["network", "ls", "-q", *filters])
    if networks:
        _docker(["network", "rm", *networks])
    return {"containers": len(containers), "images": len(images), "volumes": len(volumes), "networks": len(networks)}
