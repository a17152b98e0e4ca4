"""observe: a 1280x800 PNG screenshot of a desktop through the SDK vs ``docker exec <the same container> import
-window root`` (ImageMagick) plus ``docker cp`` of the file out. The screen shows two xterms full of text, so both
paths encode a real picture, not an empty one. Back to back, then both again with a pause between calls.

The agent deflates again only the bands of rows that changed since its last screenshot, so ours is timed three ways:
the screen unchanged; after a key typed into an xterm (an agent's act-then-observe: one band of text changes); and
after the root window's colour flips, which changes every band (the cost of a whole new frame). The baseline encodes
the whole screen every time whatever changed. The whole new frame is timed once more as ``zstd`` (the screen's BGRX
pixels, Zstandard-compressed: no conversion, about 3 ms of the agent's CPU where PNG takes 11-13 ms), through the
control plane and over a direct lane to the agent (docs/lanes.md); the details
give each format's bytes and what decoding it to a Pillow image (``Screenshot.image()``) costs the caller.

Back to back, the sandbox's CPU quota (1 CPU) throttles it now and then (the screenshot's encoder runs on two
threads, and the X server is in the same cgroup): that is the p99 of that row."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

from PIL import Image

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.report import Row, Target
from bench.sections.common import require_lane, series
from bench.stats import Summary, speedup
from sandbox.client import AsyncLane, AsyncSandbox
from sandbox.models import Screenshot

NAME = "observe"
SPEEDUP = 8.0
WIDTH, HEIGHT = 1280, 800
APPS = (
    "xterm -geometry 110x48+8+8 -e sh -c 'ls -l /usr/bin; exec sleep 100000'",
    "xterm -geometry 90x32+620+300 -e sh -c 'ps aux; ls -l /etc; exec sleep 100000'",
)
BASELINE = "docker exec import + docker cp"
FRAME_TARGET_MS = 5.0
# Flips the root window's colour: every 32-row band of the screen has some root showing at its right.
FLIP_ROOT = """
import sys
from Xlib import display
d = display.Display()
root = d.screen().root
root.change_attributes(background_pixel=int(sys.argv[1], 16))
root.clear_area()
d.sync()
"""
THROTTLED = "its p99 comes from the sandbox's 1-CPU quota: back to back, CFS throttles it now and then"


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


async def _observe(
    sandbox: AsyncSandbox | AsyncLane, sizes: list[int], shots: list[Screenshot], fmt: str = "png"
) -> None:
    shot = (await sandbox.observe(format=fmt)).screenshot
    if shot is None or (shot.width, shot.height, shot.format) != (WIDTH, HEIGHT, fmt):
        raise BenchError(f"unexpected screenshot: {shot!r}")
    sizes.append(len(shot.data))
    shots[:] = [shot]


def _decode_ms(shot: Screenshot, n: int = 20) -> float:
    """The median time ``Screenshot.image()`` takes (pixels loaded)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        shot.image().load()
        times.append(time.perf_counter() - started)
    return round(sorted(times)[n // 2] * 1000, 3)


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        return image.size


async def run(bench: Bench) -> SectionResult:
    n, warmup, pace = bench.options.observe_samples, bench.options.observe_warmup, bench.options.pace_ms / 1000
    progress = bench.progress
    dest = bench.workdir / "baseline-shot.png"
    sizes: list[int] = []
    zstd_sizes: list[int] = []
    png_shot: list[Screenshot] = []
    zstd_shot: list[Screenshot] = []
    paced: tuple[list[float], list[float]] | None = None
    async with bench.platform("observe") as platform:
        sandbox = await platform.client.create(kind="desktop", screen={"width": WIDTH, "height": HEIGHT})
        await _show_apps(sandbox)
        container = await bench.container_of(sandbox)

        async def ours_call() -> None:
            await _observe(sandbox, sizes, png_shot)

        async def zstd_call() -> None:
            await _observe(sandbox, zstd_sizes, zstd_shot, "zstd")

        async def docker_call() -> None:
            await bench.docker.screenshot(container, dest)

        async def type_a_key() -> None:
            await sandbox.step({"type": "key", "key": "a"})
            await asyncio.sleep(0.02)  # the echo drawn

        colours = itertools.cycle(["203040", "402030"])

        async def flip_root() -> None:
            done = await sandbox.exec(["python3", "-c", FLIP_ROOT, next(colours)])
            if done.exit_code != 0:
                raise BenchError(f"could not repaint the root window: {done.stderr}")

        ours = await series(progress, "observe: SDK", ours_call, n, warmup)
        typed = await series(progress, "observe: SDK, after a key", ours_call, n, warmup, before=type_a_key)
        flipped = await series(progress, "observe: SDK, whole screen new", ours_call, n, warmup, before=flip_root)
        flipped_png = (sizes[-1], png_shot[0])
        zstd = await series(progress, "observe: SDK zstd, whole screen new", zstd_call, n, warmup, before=flip_root)
        async with sandbox.lane() as lane:

            async def lane_call() -> None:
                await _observe(lane, zstd_sizes, zstd_shot, "zstd")

            laned = await series(
                progress, "observe: lane zstd, whole screen new", lane_call, n, warmup, before=flip_root
            )
            require_lane(lane)
        docker = await series(progress, "observe: docker", docker_call, n, warmup)
        if pace:
            paced = (
                await series(progress, "observe: SDK, paced", ours_call, n, warmup, pause_s=pace),
                await series(progress, "observe: docker, paced", docker_call, n, warmup, pause_s=pace),
            )
        if await asyncio.to_thread(_png_size, dest) != (WIDTH, HEIGHT):
            raise BenchError(f"the baseline's screenshot is not {WIDTH}x{HEIGHT}")
        await sandbox.close()
    name = f"screenshot {WIDTH}x{HEIGHT} PNG, SDK observe"
    base = Summary.of(docker)
    rows = [
        _row(f"{name}, screen unchanged", Summary.of(ours), base, note=THROTTLED),
        _row(f"{name} after a key typed (act, then observe)", Summary.of(typed), base, frame_target=True),
        _row(f"{name} after the whole screen changed", Summary.of(flipped), base, frame_target=True),
        _row(
            f"screenshot {WIDTH}x{HEIGHT} zstd, SDK observe after the whole screen changed",
            Summary.of(zstd),
            base,
            frame_target=True,
        ),
        _row(
            f"screenshot {WIDTH}x{HEIGHT} zstd, direct lane observe after the whole screen changed",
            Summary.of(laned),
            base,
            frame_target=True,
        ),
    ]
    if paced is not None:
        name = f"{name}, screen unchanged, {bench.options.pace_ms:g} ms apart"
        rows.append(_row(name, Summary.of(paced[0]), Summary.of(paced[1])))
    details = {
        "png_bytes": {"ours": sizes[-1], "baseline": dest.stat().st_size},
        "whole_new_frame": {
            "png_bytes": flipped_png[0],
            "zstd_bytes": zstd_sizes[-1],
            "png_image_ms": await asyncio.to_thread(_decode_ms, flipped_png[1]),
            "zstd_image_ms": await asyncio.to_thread(_decode_ms, zstd_shot[0]),
        },
    }
    return SectionResult(rows, details)


def _row(name: str, ours: Summary, base: Summary, *, note: str = "", frame_target: bool = False) -> Row:
    ratio = speedup(base.p50, ours.p50)
    if frame_target:
        target = Target(f"p50 ≤ {FRAME_TARGET_MS:g} ms", ours.p50 * 1000 <= FRAME_TARGET_MS)
    else:
        target = Target(f"≥ {SPEEDUP:g}x exec+copy", ratio is not None and ratio >= SPEEDUP)
    return Row(NAME, name, ours, base, BASELINE, ratio, target, note)
