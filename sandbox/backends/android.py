"""What every backend asks of an android sandbox (docs/android.md), backend-neutral: the emulator's environment and
the memory it needs. The device itself (KVM) is each backend's own: ``/dev/kvm`` passed by the Docker backend
(``docker/android_params.py``), a device-plugin resource on Kubernetes (``kubernetes/manifests.py``)."""

from __future__ import annotations

from sandbox.errors import FailedPrecondition
from sandbox.models import SandboxKind, SandboxSpec

SCREEN_ENV = "SANDBOX_ANDROID_SCREEN"
PHONE_SCREEN = "1080x1920x24"
"""The device's display (portrait phone) unless the spec's env sets ``SANDBOX_ANDROID_SCREEN``."""
GUEST_RAM_MB = 2048
"""``hw.ramSize`` of the AVD the image's entrypoint writes (images/android/entrypoint.sh)."""
MIN_MEMORY_MB = 3072
"""The guest's RAM plus the emulator process (QEMU, swiftshader, the gRPC controller) and adb: below this the
emulator is killed by the memory limit while it boots."""
BUILD_HINT = (
    "the android image is built from a local Android SDK: "
    "SANDBOX_ANDROID_SDK=/path/to/android-sdk sandbox images build android (see docs/android.md)"
)


def is_android(spec: SandboxSpec) -> bool:
    return spec.kind is SandboxKind.ANDROID


def check_resources(spec: SandboxSpec) -> None:
    """FailedPrecondition when the spec's memory cannot hold the emulator (refused before anything is made)."""
    if spec.resources.memory_mb < MIN_MEMORY_MB:
        raise FailedPrecondition(
            f"android sandboxes need resources.memory_mb >= {MIN_MEMORY_MB} (the emulator's {GUEST_RAM_MB} MB guest "
            f"RAM and the emulator itself); this spec asks for {spec.resources.memory_mb}"
        )


def environment(spec: SandboxSpec) -> dict[str, str]:
    """What the emulator's entrypoint reads, on top of the common environment: the device's screen (the spec's
    env wins)."""
    return {SCREEN_ENV: spec.env.get(SCREEN_ENV) or PHONE_SCREEN}


BOOT_TIMEOUT_S = 600.0
"""How long a new android instance may take to be ready when the caller sets no deadline: its health waits for
``sys.boot_completed`` (a cold boot takes minutes, far more than the other kinds' start)."""


def ready_timeout(spec: SandboxSpec, configured: float) -> float:
    """The backend's ready timeout for ``spec`` when the caller gave none."""
    return max(configured, BOOT_TIMEOUT_S) if is_android(spec) else configured
