"""The backend a server's config selects. Each backend's SDK is imported only when that backend is made.

Only production backends can be selected here; the fake backend of the tests (``sandbox.testing``) is
built by the tests themselves and no config file can name it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Discriminator, Tag

from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.kubernetes.config import KubernetesConfig

if TYPE_CHECKING:
    from sandbox.backends.base import Backend


def _backend_type(value: Any) -> str:
    """The ``type`` of a backend's settings; a config without one means Docker, as before there were two."""
    found = value.get("type", "docker") if isinstance(value, dict) else getattr(value, "type", "docker")
    return str(found)


BackendConfig = Annotated[
    Annotated[DockerConfig, Tag("docker")] | Annotated[KubernetesConfig, Tag("kubernetes")],
    Discriminator(_backend_type),
]
"""The union of the production backends' configs, discriminated by ``type`` ("docker" when omitted)."""


def make_backend(config: DockerConfig | KubernetesConfig) -> Backend:
    if isinstance(config, KubernetesConfig):
        from sandbox.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(config)
    from sandbox.backends.docker.backend import DockerBackend

    return DockerBackend(config)
