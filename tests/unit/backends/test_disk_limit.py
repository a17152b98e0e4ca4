"""``Resources.disk_mb``, the per-sandbox disk limit, without an engine or a cluster: the model's bounds, the proto
round trip, when the Docker backend can enforce it (from the engine's info) and its run parameter, and the refusal
through the real ``DockerBackend.create`` of a spec the engine cannot enforce, before anything is made. The real
engine's refusal and the live limit are in tests/docker/test_disk_limit.py; the pod's limit in
tests/k8s/test_backend_manifests.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from sandbox.backends.docker import disk
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.errors import FailedPrecondition
from sandbox.models import Resources, SandboxSpec
from sandbox.wire import convert

EXT4 = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]}
XFS = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "xfs"], ["Supports d_type", "true"]]}


def limited(disk_mb: int | None = 1024) -> SandboxSpec:
    return SandboxSpec.model_validate({"kind": "terminal", "resources": {"disk_mb": disk_mb}})


def test_the_limit_is_optional_and_bounded() -> None:
    assert Resources().disk_mb is None
    assert Resources(disk_mb=64).disk_mb == 64 and Resources(disk_mb=1_048_576).disk_mb == 1_048_576
    for wrong in (0, 63, 1_048_577, -1, "lots"):
        with pytest.raises(ValidationError):
            Resources.model_validate({"disk_mb": wrong})


@pytest.mark.parametrize("disk_mb", [None, 64, 2048])
def test_the_limit_survives_the_proto(disk_mb: int | None) -> None:
    spec = limited(disk_mb)
    message = convert.spec_to_proto(spec)
    assert message.resources.HasField("disk_mb") is (disk_mb is not None)
    assert convert.spec_from_proto(message) == spec


@pytest.mark.parametrize(
    ("info", "why"),
    [
        (EXT4, "overlay2 on extfs"),
        ({"Driver": "vfs", "DriverStatus": []}, "vfs on an unknown file system"),
        ({}, "unknown on an unknown file system"),
        ({"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}, "overlayfs"),
    ],
)
def test_engines_that_cannot_enforce_it_are_told_apart(info: dict[str, Any], why: str) -> None:
    reason = disk.unenforceable(info)
    assert reason is not None and why in reason and "XFS mounted with pquota" in reason
    with pytest.raises(FailedPrecondition, match=r"resources\.disk_mb cannot be enforced on this Docker engine"):
        disk.check(limited(), info)
    disk.check(limited(None), info)  # no limit asked: nothing to refuse


def test_overlay2_on_xfs_can_and_the_run_parameter_says_the_size() -> None:
    assert disk.unenforceable(XFS) is None
    disk.check(limited(), XFS)
    assert disk.run_params(limited(2048)) == {"storage_opt": {"size": "2048M"}}
    assert disk.run_params(limited(None)) == {}


async def test_docker_run_params_carry_the_limit(tmp_path: Path) -> None:
    backend = DockerBackend(DockerConfig(owner="unit", socket_root=str(tmp_path), base_url="unix:///nonexistent"))
    with_limit = await backend._run_params("d-1", limited(512), str(tmp_path / "s"), None, None)
    without = await backend._run_params("d-2", limited(None), str(tmp_path / "s"), None, None)
    assert with_limit["storage_opt"] == {"size": "512M"} and "storage_opt" not in without


async def test_docker_create_refuses_what_the_engine_cannot_enforce_before_making_anything(tmp_path: Path) -> None:
    backend = DockerBackend(DockerConfig(owner="unit", socket_root=str(tmp_path / "sockets")))
    backend._info = {**EXT4, "NCPU": 4}  # what this machine's engine says (asked once, then cached)
    with pytest.raises(FailedPrecondition, match="overlay2 on extfs"):
        await backend.create("d-3", limited())
    assert not (tmp_path / "sockets").exists()


def test_the_engines_own_refusal_becomes_the_specs() -> None:
    refusal = disk.refused("--storage-opt is supported only for overlay over xfs with 'pquota' mount option")
    assert isinstance(refusal, FailedPrecondition) and "pquota" in refusal.message
