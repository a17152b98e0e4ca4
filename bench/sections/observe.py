"""observe: a 1280x800 PNG screenshot of a desktop through the SDK vs ``docker exec <the same container> import
-window root`` (ImageMagick) plus ``docker cp`` of the file out. The screen shows two xterms full of text, so both
paths encode a real picture, not an empty one."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from PIL import Image

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import series
from bench.stats import Summary, speedup
from sandbox.client import AsyncSandbox

NAME = "observe"
SPEEDUP = 8.0
WIDTH, HEIGHT = 1280, 800
APPS = (
    "xterm -geometry 110x48+8+8 -e sh -c 'ls -l /usr/bin; exec sleep 100000'",
    "xterm -geometry 90x32+620+300 -e sh -c 'ps aux; ls -l /etc; exec sleep 100000'",
)
BASELINE = "docker exec import + docker cp"


async def _show_apps(sandbox: AsyncSandbox) -> None:
    for app in APPS:
        await sandbox.exec(f"{app} >/dev/null 2>&1 &", keep_background=True)
    give_up = time.monotonic() + 30
    while time.monotonic() < give_up:
        found = await sandbox.exec("xdotool search --onlyvisible --class xterm")
        if len(found.stdout.split()) >= len(APPS):
            await asyncio.sleep(1.0)  # their text drawn
            return
        await asyncio.sleep(0.2)
    raise BenchError("the xterm windows did not appear on the desktop within 30 s")


async def _observe(sandbox: AsyncSandbox, sizes: list[int]) -> None:
    shot = (await sandbox.observe(format="png")).screenshot
    if shot is None or (shot.width, shot.height, shot.format) != (WIDTH, HEIGHT, "png"):
        raise BenchError(f"unexpected screenshot: {shot!r}")
    sizes.append(len(shot.data))


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        return image.size


async def run(bench: Bench) -> SectionResult:
    n, warmup = bench.options.observe_samples, bench.options.observe_warmup
    progress = bench.progress
    dest = bench.workdir / "baseline-shot.png"
    sizes: list[int] = []
    async with bench.platform("observe") as platform:
        sandbox = await platform.client.create(kind="desktop", screen={"width": WIDTH, "height": HEIGHT})
        await _show_apps(sandbox)
        container = await bench.container_of(sandbox)
        ours = await series(progress, "observe: SDK", lambda: _observe(sandbox, sizes), n, warmup)
        docker = await series(progress, "observe: docker", lambda: bench.docker.screenshot(container, dest), n, warmup)
        if await asyncio.to_thread(_png_size, dest) != (WIDTH, HEIGHT):
            raise BenchError(f"the baseline's screenshot is not {WIDTH}x{HEIGHT}")
        await sandbox.close()
    base, our = Summary.of(docker), Summary.of(ours)
    ratio = speedup(base.p50, our.p50)
    target = Target(f"≥ {SPEEDUP:g}x exec+copy", ratio is not None and ratio >= SPEEDUP)
    row = Row(NAME, f"screenshot {WIDTH}x{HEIGHT} PNG, SDK observe", our, base, BASELINE, ratio, target)
    details = {"png_bytes": {"ours": sizes[-1], "baseline": dest.stat().st_size}}
    return SectionResult([row], details)
