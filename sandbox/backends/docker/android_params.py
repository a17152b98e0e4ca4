"""The Docker run parameters of an android sandbox (docs/android.md): the host's KVM device, passed as
``--device /dev/kvm``, and the emulator's environment; no capability is added (the emulator needs none: KVM is
an ioctl on the device node). Refused, before anything is made, on a host without the device."""

from __future__ import annotations

import os
import stat
from typing import Any

from sandbox.backends import android
from sandbox.errors import FailedPrecondition
from sandbox.models import SandboxSpec

KVM_IN_SANDBOX = "/dev/kvm"


def require_kvm(device: str) -> os.stat_result:
    """The host's KVM device, or FailedPrecondition naming what is missing."""
    try:
        return os.stat(device)
    except OSError as e:
        raise FailedPrecondition(
            f"android sandboxes need /dev/kvm on the Docker host (KVM): {device} is not there ({e.strerror}); run "
            "the control plane's engine on a host with hardware virtualization and the kvm module loaded "
            "(kvm_intel or kvm_amd), or set the docker backend's kvm_device to where the device is"
        ) from e


def run_params(spec: SandboxSpec, kvm_device: str) -> dict[str, Any]:
    """What an android container adds to the common run parameters: ``devices``, ``group_add`` (the device's
    group, when only its group may open it: the sandbox user is not root) and ``environment`` additions. Raises
    FailedPrecondition when the device is missing or the spec's memory cannot hold the emulator."""
    found = require_kvm(kvm_device)
    android.check_resources(spec)
    params: dict[str, Any] = {
        "devices": [f"{kvm_device}:{KVM_IN_SANDBOX}:rwm"],
        "environment": android.environment(spec),
    }
    others_rw = stat.S_IROTH | stat.S_IWOTH
    if found.st_mode & others_rw != others_rw and found.st_gid != 0:
        params["group_add"] = [str(found.st_gid)]  # e.g. the host's kvm group for a 0660 root:kvm node
    return params
