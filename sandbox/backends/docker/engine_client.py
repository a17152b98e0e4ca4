"""The docker SDK client the backend talks to the engine with."""

from __future__ import annotations

from typing import Any

import docker
from docker.transport import UnixHTTPAdapter


def connect(base_url: str | None, **kwargs: Any) -> docker.DockerClient:
    """A client of the engine at ``base_url`` (None: the environment's ``DOCKER_HOST``, or the local socket).

    Over a unix socket, requests' per-call look-ups of proxy variables and ``~/.netrc`` are turned off: they never
    apply to a socket, and under a burst of engine calls decoding ``os.environ`` on every call was a tenth of the
    control plane's time holding the GIL. Over TCP they stay, as the docker CLI honours ``HTTPS_PROXY`` too."""
    client = docker.DockerClient(base_url=base_url, **kwargs) if base_url else docker.from_env(**kwargs)
    if isinstance(client.api.get_adapter(client.api.base_url), UnixHTTPAdapter):
        client.api.trust_env = False
    return client
