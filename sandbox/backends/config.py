"""One config model per backend, discriminated by ``type``; a factory that imports a
backend's SDK only when that backend is used."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from sandbox.backends.base import Backend


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DockerConfig(_Config):
    type: Literal["docker"] = "docker"
    base_url: str | None = Field(None, description="Engine address; DOCKER_HOST or the local socket when omitted.")
    owner: str = Field(
        "default",
        pattern=r"^[a-zA-Z0-9_.-]{1,63}$",
        description="Value of the sandbox.owner label: this control plane's containers, and only them, are its own.",
    )
    socket_root: str = Field(
        "/run/sandbox-platform",
        description="Host directory holding one agent-socket directory per sandbox (kept short: unix paths max 107).",
    )
    image_prefix: str = Field("sandbox", description="Images are <prefix>/<kind>:latest unless the spec names one.")
    runtime: str | None = Field(
        None, description="OCI runtime for sandboxes (e.g. runsc); the engine's default if None."
    )
    ready_timeout_s: float = Field(60.0, gt=0, description="How long a new sandbox may take to become healthy.")
    sandbox_uid: int = Field(1000, description="User the images run as; owns the socket directory.")
    max_pool_size: int = Field(64, ge=1, description="Concurrent HTTP connections to the engine.")


class FakeConfig(_Config):
    type: Literal["fake"] = "fake"
    socket_root: str = Field(
        default_factory=lambda: os.path.join(os.environ.get("TMPDIR", "/tmp"), "sandbox-fake"),
        description="Where the fake runs its in-process agents' sockets.",
    )


BackendConfig = Annotated[DockerConfig | FakeConfig, Field(discriminator="type")]


def make_backend(config: DockerConfig | FakeConfig) -> Backend:
    if isinstance(config, DockerConfig):
        from sandbox.backends.docker.backend import DockerBackend

        return DockerBackend(config)
    from sandbox.backends.fake import FakeBackend

    return FakeBackend(config)
