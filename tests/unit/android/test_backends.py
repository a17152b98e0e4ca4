"""Android sandboxes in the Docker and Kubernetes backends, without an engine, a cluster or KVM: the Docker run
parameters (the KVM device, its group, the emulator's environment) with a stand-in device file, and the refusals
(no KVM device, no KVM device plugin, too little memory) through the real backends' ``create``, which must refuse
before asking the engine or the API server for anything. The pod manifest's schema validation is in
tests/k8s/test_backend_manifests.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends import android
from sandbox.backends.docker import android_params
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import FailedPrecondition
from sandbox.models import ANDROID_MEMORY_MB, SandboxSpec
from sandbox.wire.convert import spec_from_proto, spec_to_proto

KVM_GID = 4242
PHONE = {"kind": "android", "resources": {"memory_mb": 4096}}


def spec(**extra: Any) -> SandboxSpec:
    return SandboxSpec.model_validate({**PHONE, **extra})


@pytest.fixture
def kvm(tmp_path: Path) -> Path:
    """A stand-in for the host's /dev/kvm: the backend only checks it is there and reads its mode and group."""
    device = tmp_path / "kvm"
    device.touch(mode=0o660)
    device.chmod(0o660)
    if os.geteuid() == 0:
        os.chown(device, -1, KVM_GID)  # root:kvm as on most hosts (root may give it any group)
    return device


def docker_backend(tmp_path: Path, device: Path) -> DockerBackend:
    # An engine address nothing listens on: any call to the engine would fail with Unavailable, not the refusal.
    config = DockerConfig(
        owner="unit", socket_root=str(tmp_path / "sockets"), kvm_device=str(device), base_url="unix:///nonexistent"
    )
    return DockerBackend(config)


async def test_docker_runs_android_with_the_kvm_device_its_group_and_the_phone_screen(
    tmp_path: Path, kvm: Path
) -> None:
    backend = docker_backend(tmp_path, kvm)
    params = await backend._run_params("andr-1", spec(), str(tmp_path / "sock"), None, None)
    assert params["devices"] == [f"{kvm}:/dev/kvm:rwm"]
    if os.stat(kvm).st_gid != 0:  # 0660: only its group may open it (never group 0: root's)
        assert params["group_add"] == [str(os.stat(kvm).st_gid)]
    env = params["environment"]
    assert env["SANDBOX_KIND"] == "android" and env["SANDBOX_ANDROID_SCREEN"] == "1080x1920x24"
    assert params["image"] == "sandbox/android:latest"
    assert params["cap_drop"] == ["ALL"] and "cap_add" not in params and "privileged" not in params
    assert params["security_opt"] == ["no-new-privileges"] and params["mem_limit"] == "4096m"
    assert params["network_mode"] == "none"


async def test_docker_android_env_and_an_open_device(tmp_path: Path, kvm: Path) -> None:
    kvm.chmod(0o666)  # open to every user (Ubuntu's udev rule): no group needed
    backend = docker_backend(tmp_path, kvm)
    phone = spec(env={"SANDBOX_ANDROID_SCREEN": "720x1280x24", "FOO": "bar"})
    params = await backend._run_params("andr-2", phone, str(tmp_path / "sock"), None, None)
    assert "group_add" not in params
    assert params["environment"]["SANDBOX_ANDROID_SCREEN"] == "720x1280x24"
    assert params["environment"]["FOO"] == "bar"


async def test_the_other_kinds_get_no_device(tmp_path: Path, kvm: Path) -> None:
    backend = docker_backend(tmp_path, kvm)
    params = await backend._run_params("term-1", SandboxSpec(kind="terminal"), str(tmp_path / "s"), None, None)
    assert "devices" not in params and "group_add" not in params
    assert "SANDBOX_ANDROID_SCREEN" not in params["environment"]


def test_run_params_refuse_without_the_device(tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match=r"android sandboxes need /dev/kvm on the Docker host \(KVM\)"):
        android_params.run_params(spec(), str(tmp_path / "no-kvm"))


async def test_docker_create_refuses_without_kvm_before_touching_the_engine(tmp_path: Path) -> None:
    backend = docker_backend(tmp_path, tmp_path / "no-kvm")
    with pytest.raises(FailedPrecondition, match=f"need /dev/kvm on the Docker host.*{tmp_path / 'no-kvm'}"):
        await backend.create("andr-3", spec())
    assert not (tmp_path / "sockets").exists()  # nothing made, not even the socket directory
    assert backend._client is None  # the engine was never reached


async def test_docker_create_refuses_an_android_spec_too_small_for_the_emulator(tmp_path: Path, kvm: Path) -> None:
    backend = docker_backend(tmp_path, kvm)
    with pytest.raises(FailedPrecondition, match=f"resources.memory_mb >= {android.MIN_MEMORY_MB}"):
        await backend.create("andr-4", SandboxSpec(kind="android", resources={"memory_mb": 2048}))
    assert backend._client is None


def test_an_android_spec_that_names_no_memory_gets_the_emulators() -> None:
    assert SandboxSpec(kind="android").resources.memory_mb == ANDROID_MEMORY_MB >= android.MIN_MEMORY_MB
    assert SandboxSpec(kind="android", resources={"cpus": 2}).resources.memory_mb == ANDROID_MEMORY_MB
    assert SandboxSpec(kind="android", resources={"memory_mb": 3072}).resources.memory_mb == 3072
    assert SandboxSpec(kind="terminal").resources.memory_mb == 2048
    spec = SandboxSpec(kind="android")
    assert spec_from_proto(spec_to_proto(spec)) == spec == SandboxSpec.model_validate_json(spec.model_dump_json())


async def test_kubernetes_create_refuses_android_without_a_kvm_plugin(tmp_path: Path) -> None:
    backend = KubernetesBackend(
        KubernetesConfig(owner="unit", android_kvm_resource=None, snapshot_dir=str(tmp_path / "snap"))
    )
    with pytest.raises(FailedPrecondition, match="android_kvm_resource is not set"):
        await backend.create("andr-5", spec())
    assert backend._api is None  # refused before any call to the API server


def test_an_explicit_deadline_wins_and_android_otherwise_waits_for_the_boot() -> None:
    assert android.ready_timeout(spec(), 60.0) == android.BOOT_TIMEOUT_S
    assert android.ready_timeout(SandboxSpec(kind="terminal"), 60.0) == 60.0
    assert android.ready_timeout(spec(), 900.0) == 900.0
