"""The baselines: the docker CLI doing what the SDK does, the way a user would, run from asyncio subprocesses.

A baseline container is the same image with the same limits the platform's docker backend sets (network ``none``,
docker-init, every capability dropped, no-new-privileges, 1 CPU, 2 GiB memory and swap, 512 pids, 256 MiB shm),
minus the agent-socket bind mount. It is "ready" when:

- terminal: a ``docker exec <c> true`` succeeds;
- desktop: the window manager owns the screen (``xprop -root _NET_SUPPORTING_WM_CHECK`` through ``docker exec``) -
  the condition the image's entrypoint and the agent's health check wait for; before it, a screenshot shows no
  usable desktop, so a bare ``docker exec true`` would flatter the baseline.

Probes run back to back (each is itself a ``docker exec``). Every container carries the run's owner labels.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import BenchError
from bench.cleanup import remove_containers

IMAGE = "sandbox/{kind}:latest"
SCREEN = "1280x800x24"
RUN_FLAGS: tuple[str, ...] = (
    "--network", "none", "--init", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
    "--cpus", "1", "--memory", "2048m", "--memory-swap", "2048m", "--pids-limit", "512", "--shm-size", "256m",
)  # fmt: skip
READY_PROBES: dict[str, tuple[str, ...]] = {
    "terminal": ("true",),
    "desktop": ("sh", "-c", "xprop -root _NET_SUPPORTING_WM_CHECK 2>/dev/null | grep -q 'window id'"),
}
SHOT_IN_CONTAINER = "/tmp/bench-shot.png"
BASELINE_LABEL = {"sandbox.bench.role": "baseline"}
"""Besides the owner labels: no ``sandbox.id`` label, so the control plane never takes a baseline for its own."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class DockerCli:
    """The ``docker`` command, with this run's owner labels on every container it starts."""

    def __init__(self, owner_labels: Mapping[str, str]) -> None:
        self.owner_labels = dict(owner_labels)

    async def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> Completed:
        proc = await asyncio.create_subprocess_exec(
            "docker", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except BaseException:  # a timeout or Ctrl-C: the child we started goes too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        done = Completed(proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and done.returncode != 0:
            raise BenchError(f"docker {' '.join(args[:3])} … failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        return done

    def _label_flags(self) -> list[str]:
        flags = []
        for key, value in {**self.owner_labels, **BASELINE_LABEL}.items():
            flags += ["--label", f"{key}={value}"]
        return flags

    async def run(self, kind: str) -> str:
        """``docker run -d`` of the kind's image; the container id (not yet ready)."""
        env = ["-e", f"SANDBOX_KIND={kind}", "-e", f"SANDBOX_SCREEN={SCREEN}"]
        done = await self("run", "-d", *RUN_FLAGS, *self._label_flags(), *env, IMAGE.format(kind=kind))
        return done.stdout.strip()

    async def wait_ready(self, container: str, kind: str, *, timeout: float = 60) -> None:
        give_up = time.monotonic() + timeout
        while True:
            done = await self("exec", container, *READY_PROBES[kind], check=False, timeout=timeout)
            if done.returncode == 0:
                return
            if time.monotonic() > give_up:
                raise BenchError(f"baseline {kind} container {container[:12]} not ready within {timeout:g} s")

    async def run_ready(self, kind: str) -> str:
        """``docker run`` and wait until ready: what a user does to get a sandbox."""
        container = await self.run(kind)
        try:
            await self.wait_ready(container, kind)
        except BaseException:
            await asyncio.shield(self.remove([container]))
            raise
        return container

    async def exec(self, container: str, *argv: str) -> None:
        await self("exec", container, *argv)

    async def screenshot(self, container: str, dest: Path) -> None:
        """The naive path: ImageMagick's ``import`` in the container, then ``docker cp`` of the file out."""
        await self("exec", container, "import", "-window", "root", SHOT_IN_CONTAINER)
        await self("cp", f"{container}:{SHOT_IN_CONTAINER}", str(dest))

    async def remove(self, containers: Sequence[str]) -> None:
        await asyncio.to_thread(remove_containers, containers)

    async def find(self, labels: Mapping[str, str]) -> list[str]:
        """Ids of running containers carrying every one of ``labels`` and this run's owner labels."""
        filters = []
        for key, value in {**self.owner_labels, **labels}.items():
            filters += ["--filter", f"label={key}={value}"]
        done = await self("ps", "-q", "--no-trunc", *filters)
        return done.stdout.split()
