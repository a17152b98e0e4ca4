"""What a sandbox is asked to be (``SandboxSpec``: kind, image, resources, screen, network, volumes, lease), and
what the platform says of one it made (``SandboxInfo``) or of a snapshot (``SnapshotInfo``)."""

from __future__ import annotations

import enum
import re
from typing import Literal

from pydantic import Field, StrictBool, field_validator, model_validator

from sandbox.models.base import Model
from sandbox.models.rules import MOUNT_PATH, SNAPSHOT_NAME, SYSTEM_DIR, VOLUME_NAME, EnvName, EnvValue, keys_must_match

MAX_LEASE_S = 7 * 24 * 3600
"""The longest lease (seconds): the limit of ``SandboxSpec.ttl_s`` and ``idle_timeout_s``, and of a renewal."""
GROUP_MAX = 1024  # the most sandboxes one group create makes


class SandboxKind(enum.StrEnum):
    TERMINAL = "terminal"
    DESKTOP = "desktop"
    BROWSER = "browser"
    ANDROID = "android"

    @property
    def has_display(self) -> bool:
        return self is not SandboxKind.TERMINAL


class NetworkPolicy(enum.StrEnum):
    NONE = "none"
    """No interface but loopback (the default)."""
    INTERNAL = "internal"
    """A private network shared by the platform's sandboxes, with no route outside."""
    EGRESS = "egress"
    """Outbound access through the engine's default bridge. Opt-in only."""


ANDROID_MEMORY_MB = 4096
"""An android sandbox's memory when its spec names none: the emulator's guest RAM, the emulator and adb, with room
(``sandbox.backends.android.MIN_MEMORY_MB`` is the least it boots with)."""


class Resources(Model):
    cpus: float = Field(1.0, gt=0, le=64, description="CPU cores the sandbox may use.")
    memory_mb: int = Field(
        2048, ge=64, le=262_144, description="Memory limit, swap included (android: 4096 when not given)."
    )
    pids: int = Field(512, ge=16, le=65_536, description="Process and thread limit (stops fork bombs).")
    shm_mb: int = Field(256, ge=16, le=16_384, description="Size of /dev/shm (Chromium needs room here).")
    disk_mb: int | None = Field(
        None,
        ge=64,
        le=1_048_576,
        description="Size limit of the sandbox's writable file system; none when omitted. A backend that cannot "
        "enforce it refuses the spec (docs/hardening.md).",
    )


class ScreenSize(Model):
    width: int = Field(1280, ge=320, le=7680)
    height: int = Field(800, ge=200, le=4320)
    depth: Literal[24] = 24


class VolumeMount(Model):
    name: str = Field(
        pattern=VOLUME_NAME, description="Name of a platform volume (1-63 of [a-zA-Z0-9_.-]); created on first use."
    )
    path: str = Field(
        json_schema_extra={"pattern": MOUNT_PATH, "not": {"pattern": SYSTEM_DIR}},
        description="Absolute path inside the sandbox, without '..', and not /proc, /sys or /run/sandbox.",
    )
    read_only: StrictBool = False

    @field_validator("path")
    @classmethod
    def _valid_path(cls, v: str) -> str:
        if not re.fullmatch(MOUNT_PATH, v) or re.fullmatch(SYSTEM_DIR, v):
            raise ValueError("path must be absolute, without '..', and not a system directory")
        return v


class SandboxSpec(Model):
    kind: SandboxKind
    image: str | None = Field(None, description="Image to run; the kind's built image when omitted.")
    resources: Resources = Resources()
    screen: ScreenSize = ScreenSize()
    network: NetworkPolicy = NetworkPolicy.NONE
    volumes: tuple[VolumeMount, ...] = ()
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=64, json_schema_extra=keys_must_match)
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=64, description="Free-form labels, kept with the sandbox."
    )
    snapshot: str | None = Field(
        None,
        pattern=SNAPSHOT_NAME,
        description="Start from this snapshot of the caller's instead of the image (a snapshot's name).",
    )
    ttl_s: float = Field(6 * 3600, gt=0, le=MAX_LEASE_S, description="Lease: deleted this long after creation.")
    idle_timeout_s: float | None = Field(
        1800, gt=0, le=MAX_LEASE_S, description="Lease: deleted after this long with no call on it; None: never."
    )
    auto_recover: StrictBool = Field(False, description="Replace the sandbox when it fails a health check.")

    @model_validator(mode="after")
    def _kind_defaults(self) -> SandboxSpec:
        """An android spec that names no memory gets the emulator's (the common default cannot boot it)."""
        if self.kind is SandboxKind.ANDROID and "memory_mb" not in self.resources.model_fields_set:
            resources = self.resources.model_copy(update={"memory_mb": ANDROID_MEMORY_MB})
            resources.model_fields_set.add("memory_mb")
            object.__setattr__(self, "resources", resources)
        return self


class SandboxState(enum.StrEnum):
    CREATING = "creating"
    RUNNING = "running"
    UNHEALTHY = "unhealthy"
    EXPIRED = "expired"
    DELETED = "deleted"


class SandboxInfo(Model):
    id: str
    tenant: str
    kind: SandboxKind
    state: SandboxState
    spec: SandboxSpec
    created_at: float
    last_active_at: float
    expires_at: float
    error: str | None = None
    replacements: int = Field(0, description="How often a failed sandbox was replaced (auto_recover).")


class SnapshotInfo(Model):
    name: str
    tenant: str
    kind: SandboxKind
    image: str
    source: str = Field(description="The sandbox it was taken from.")
    created_at: float
    warm: int = Field(0, description="Replicas kept running so a reset to it takes no start.")
