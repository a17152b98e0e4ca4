"""The fake kubelet's image pulls: an image the engine lacks is pulled again and again, as the kubelet does.

The kubelet never gives up on a pull that failed (``ErrImagePull``): it retries with a back-off (10 s doubling to
5 min), the container waiting with reason ``ImagePullBackOff`` in between. The fake pulls nothing from a registry;
"pulling" is finding the image in the local engine. So an image tagged into the engine while a pod waits for it (a
registry that had it late) is found at the next try and the pod starts, which is what a create's start deadline is
for (the backend's startup.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import docker
import docker.errors

Report = Callable[[str, str], None]
"""Sets the pod's container waiting with (reason, message)."""


async def pull(
    client: docker.DockerClient, image: str, report: Report, *, deleted: Callable[[], bool], backoff_s: float
) -> dict[str, Any] | None:
    """The image's attributes once the engine has it; None if the pod is deleted first. Each failed try is reported
    as ``ErrImagePull``, the wait after it as ``ImagePullBackOff``."""
    while not deleted():
        try:
            attrs: dict[str, Any] = await asyncio.to_thread(client.api.inspect_image, image)
            return attrs
        except docker.errors.ImageNotFound:
            report("ErrImagePull", f'Failed to pull image "{image}": not found (the fake kubelet pulls nothing)')
        await asyncio.sleep(backoff_s / 2)
        if deleted():
            break
        report("ImagePullBackOff", f'Back-off pulling image "{image}"')
        await asyncio.sleep(backoff_s / 2)
    return None
