"""Soak: N sandboxes stepping for M minutes through a real ``sandbox server``; fewer than 0.1% failed steps, and no
growth in containers, open files, threads or the server's memory. Behind the ``soak`` marker (``make soak``; not in
``make test``): ``SOAK_SANDBOXES`` (default 8, one of them a desktop), ``SOAK_MINUTES`` (default 5)."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from sandbox.backends.base import LABEL_OWNER
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import SandboxError
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess

pytestmark = [pytest.mark.soak, pytest.mark.docker]

SANDBOXES = int(os.environ.get("SOAK_SANDBOXES", "8"))
MINUTES = float(os.environ.get("SOAK_MINUTES", "5"))
SAMPLE_S = 10.0
WARMUP_FRACTION = 0.2
"""Samples before this share of the run settle caches, pools and allocators; growth is measured after it."""
MAX_FAILED = 0.001
SOAK_OWNER = f"{OWNER}-soak"
SOAK_SOCKETS = f"/run/sbx-test-{RUN_ID}-soak"


@dataclass
class Sample:
    at: float
    rss_mib: float
    fds: int
    threads: int
    containers: int


@dataclass
class Tally:
    steps: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def fail(self, error: Exception) -> None:
        self.failed += 1
        key = f"{type(error).__name__}: {str(error)[:120]}"
        self.errors[key] = self.errors.get(key, 0) + 1


def _sample(pid: int, engine: docker.DockerClient) -> Sample:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    containers = len(engine.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={SOAK_OWNER}"}))
    return Sample(
        at=time.monotonic(),
        rss_mib=int(status["VmRSS"].split()[0]) / 1024,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        threads=int(status["Threads"]),
        containers=containers,
    )


@pytest.fixture
def server(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[ServerProcess]:
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    settings = {"pools": [{"spec": {"kind": "terminal", "labels": TEST_LABEL}, "min": 2, "max": 2}]}
    process = ServerProcess(tmp_path, owner=SOAK_OWNER, socket_root=SOAK_SOCKETS, settings=settings)
    with owned_by(docker_client, SOAK_OWNER, SOAK_SOCKETS):
        try:
            process.start()
            yield process
        finally:
            process.stop()


async def _terminal_loop(sb: AsyncSandbox, tally: Tally, until: float) -> None:
    i = 0
    while time.monotonic() < until:
        i += 1
        try:
            if i % 10 == 0:
                await sb.files.write(f"/workspace/soak-{i % 50}.txt", f"{i}\n" * 100)
                assert (await sb.files.read(f"/workspace/soak-{i % 50}.txt")).startswith(f"{i}\n".encode())
            else:
                obs = await sb.step({"type": "exec", "cmd": f"echo {i}"})
                assert obs.exec is not None and obs.exec.stdout == f"{i}\n", obs.exec
            tally.steps += 1
        except (SandboxError, AssertionError) as e:
            tally.steps += 1
            tally.fail(e)


async def _desktop_loop(sb: AsyncSandbox, tally: Tally, until: float) -> None:
    i = 0
    while time.monotonic() < until:
        i += 1
        try:
            if i % 5 == 0:
                shot = (await sb.observe()).screenshot
                assert shot is not None and shot.data.startswith(b"\x89PNG")
            else:
                await sb.step({"type": "move", "x": 10 + i % 300, "y": 10 + i % 200})
            tally.steps += 1
        except (SandboxError, AssertionError) as e:
            tally.steps += 1
            tally.fail(e)


async def _sampler(pid: int, engine: docker.DockerClient, samples: list[Sample], until: float) -> None:
    while time.monotonic() < until:
        samples.append(await asyncio.to_thread(_sample, pid, engine))
        await asyncio.sleep(min(SAMPLE_S, max(0.0, until - time.monotonic())))
    samples.append(await asyncio.to_thread(_sample, pid, engine))


@pytest.mark.timeout(MINUTES * 60 + 300)
async def test_soak(server: ServerProcess, docker_client: docker.DockerClient) -> None:
    tally = Tally()
    samples: list[Sample] = []
    async with AsyncClient(server.grpc_target, timeout=120) as client:
        kinds = ["desktop"] + ["terminal"] * (SANDBOXES - 1)
        sandboxes = await asyncio.gather(*(client.create(kind, labels=TEST_LABEL, ttl_s=3600) for kind in kinds))
        try:
            until = time.monotonic() + MINUTES * 60
            loops = [_desktop_loop(sandboxes[0], tally, until)]
            loops += [_terminal_loop(sb, tally, until) for sb in sandboxes[1:]]
            await asyncio.gather(*loops, _sampler(server.pid, docker_client, samples, until))
        finally:
            await asyncio.gather(*(sb.close() for sb in sandboxes), return_exceptions=True)

    settled = samples[max(1, int(len(samples) * WARMUP_FRACTION)) :]
    first, last = settled[: max(1, len(settled) // 4)], settled[-max(1, len(settled) // 4) :]
    rss_before = statistics.median(s.rss_mib for s in first)
    rss_after = statistics.median(s.rss_mib for s in last)
    print(
        f"\nsoak: {SANDBOXES} sandboxes (1 desktop), {MINUTES:g} min, {tally.steps} steps "
        f"({tally.steps / (MINUTES * 60):.0f}/s), {tally.failed} failed ({tally.failed / max(1, tally.steps):.4%})\n"
        f"server RSS {rss_before:.1f} -> {rss_after:.1f} MiB, fds {first[0].fds} -> {last[-1].fds}, "
        f"threads {first[0].threads} -> {last[-1].threads}, containers {[s.containers for s in samples]}"
    )
    assert tally.steps > SANDBOXES * 10, f"hardly any steps ran: {tally.steps}"
    assert tally.failed <= MAX_FAILED * tally.steps, f"{tally.failed} of {tally.steps} steps failed: {tally.errors}"
    counts = {s.containers for s in settled}
    assert len(counts) == 1, f"the container count moved while nothing was created: {[s.containers for s in samples]}"
    assert max(s.fds for s in last) <= max(s.fds for s in first) + 8, "open files grow"
    assert max(s.threads for s in last) <= max(s.threads for s in first) + 4, "threads grow"
    assert rss_after <= rss_before * 1.15 + 16, f"server memory grows: {rss_before:.1f} -> {rss_after:.1f} MiB"
    await asyncio.sleep(2)  # deletions are done when close() returns; the warm pool stays as it was
    left = await asyncio.to_thread(_sample, server.pid, docker_client)
    assert left.containers == 2, f"{left.containers} containers after every sandbox was deleted (2 warm expected)"
