"""The backend a server's config selects. Each backend's SDK is imported only when that backend is made.

Only production backends can be selected here; the fake backend of the tests (``sandbox.testing``) is
built by the tests themselves and no config file can name it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox.backends.docker.config import DockerConfig

if TYPE_CHECKING:
    from sandbox.backends.base import Backend

BackendConfig = DockerConfig
"""The union of the production backends' configs, discriminated by ``type`` once there are several."""


def make_backend(config: BackendConfig) -> Backend:
    from sandbox.backends.docker.backend import DockerBackend

    return DockerBackend(config)
