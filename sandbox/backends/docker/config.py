"""The Docker backend's settings (no docker import here: the server reads them before choosing a backend)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backends.engine_gate import EngineCallSettings

DEFAULT_TEARDOWN_LOCK = "/run/lock/sandbox-docker-teardown.lock"


class DockerConfig(BaseModel):
    """Instances as containers on one Docker engine."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["docker"] = "docker"
    base_url: str | None = Field(None, description="Engine address; DOCKER_HOST or the local socket when omitted.")
    owner: str = Field(
        "default",
        pattern=r"^[a-zA-Z0-9_.-]{1,63}$",
        description="Value of the sandbox.owner label: this control plane's containers, and only them, are its own.",
    )
    socket_root: str = Field(
        "/run/sandbox-platform",
        description="Host directory holding one agent-socket directory per instance (kept short: unix paths max 107).",
    )
    image_prefix: str = Field("sandbox", description="Images are <prefix>/<kind>:latest unless the spec names one.")
    runtime: str | None = Field(
        None, description="OCI runtime for instances (e.g. runsc); the engine's default if None."
    )
    ready_timeout_s: float = Field(60.0, gt=0, description="How long a new instance may take to become healthy.")
    sandbox_uid: int = Field(1000, description="User the images run as; owns the socket directory.")
    max_pool_size: int = Field(64, ge=1, description="Concurrent HTTP connections to the engine.")
    kvm_device: str = Field(
        "/dev/kvm",
        description="The host's KVM device, passed to android sandboxes (--device); android is refused without it.",
    )
    serial_teardown: Literal["auto", "on", "off"] = Field(
        "auto",
        description=(
            "Tear containers down one at a time, host-wide: 'auto' does so on engines before Docker 23, whose "
            "libnetwork deadlocks when two teardowns overlap (moby/moby#46661; docs/hardening.md)."
        ),
    )
    teardown_lock: str | None = Field(
        DEFAULT_TEARDOWN_LOCK,
        description="The host-wide lock file the control planes sharing an engine take turns on; None: this process.",
    )
    engine_calls: EngineCallSettings = Field(
        default_factory=EngineCallSettings,
        description=(
            "Backpressure on the engine: calls in flight per kind (create, start, commit, remove, other), the rest "
            "queued; when the engine stops answering, calls fail at once with 'unavailable' (engine_gate.py)."
        ),
    )
