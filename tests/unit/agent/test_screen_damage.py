"""Screenshots copy only the rows the X server says were drawn on, and still show exactly the screen.

Against a real Xvfb (Debian's ``xvfb``, which ``make setup`` installs): another X client draws in every way a
desktop does (on the root window, windows mapped, moved, drawn into, unmapped, the whole background changed), and
after each the agent's screenshot, built from the rows it copied and the last frame's others, must equal a capture
of the whole screen taken afresh through the region path."""

from __future__ import annotations

import asyncio
import io
import logging
import random
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from PIL import Image
from Xlib import X
from Xlib import display as xdisplay

from sandbox.agent.display.frames import BAND_ROWS
from sandbox.agent.display.service import Display
from sandbox.models.images import decode
from tests.unit.xvfb import running_xvfb

WIDTH, HEIGHT = 640, 480
BANDS = -(-HEIGHT // BAND_ROWS)


@pytest.fixture
def xvfb() -> Iterator[str]:
    with running_xvfb(WIDTH, HEIGHT) as name:
        yield name


@pytest.fixture
async def display(xvfb: str) -> AsyncIterator[Display]:
    shown = Display(xvfb, logger=logging.getLogger("test.display"))
    try:
        yield shown
    finally:
        shown.close()


@pytest.fixture
def painter(xvfb: str) -> Iterator[Any]:
    """Another X client, as a desktop's programs are."""
    d = xdisplay.Display(xvfb)
    try:
        yield d
    finally:
        d.close()


async def _cached(display: Display) -> tuple[dict[str, Any], bytes]:
    meta, data = await display.screenshot({"format": "png"})
    return meta, _pixels(data)


async def _afresh(display: Display) -> bytes:
    whole = {"x": 0, "y": 0, "width": WIDTH, "height": HEIGHT}
    _, data = await display.screenshot({"format": "png", "region": whole})
    return _pixels(data)


def _pixels(png: bytes) -> bytes:
    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB").tobytes()


def _fill(d: Any, drawable: Any, colour: int, x: int, y: int, w: int, h: int) -> None:
    gc = drawable.create_gc(foreground=colour)
    drawable.fill_rectangle(gc, x, y, w, h)
    gc.free()


async def test_the_capture_uses_the_servers_damage(display: Display) -> None:
    checked = await display.check()
    assert checked["ok"] and "drawn rows only" in checked["detail"], checked


async def test_each_way_of_drawing_shows_in_the_next_screenshot(display: Display, painter: Any) -> None:
    root = painter.screen().root
    meta, first = await _cached(display)
    assert first == await _afresh(display) and meta["bands_reused"] == 0
    meta, _ = await _cached(display)
    assert meta["bands_reused"] == meta["bands"] == BANDS, "nothing was drawn"

    window = root.create_window(100, 100, 200, 90, 0, X.CopyFromParent, background_pixel=0x2060A0)
    # What to draw, and the rows it can change (those of the bands to copy, at most).
    steps: list[tuple[str, Callable[[], None], tuple[int, int]]] = [
        ("a rectangle on the root window", lambda: _fill(painter, root, 0xFF00FF, 10, 40, 30, 10), (40, 50)),
        ("the last rows of the screen", lambda: _fill(painter, root, 0x00FF00, 500, HEIGHT - 3, 60, 3), (477, 480)),
        ("a window mapped", window.map, (100, 190)),
        ("drawn into that window", lambda: _fill(painter, window, 0xFFFF00, 5, 5, 20, 20), (105, 125)),
        ("the window moved", lambda: window.configure(x=300, y=250), (100, 340)),
        ("the window resized", lambda: window.configure(width=320, height=200), (250, 450)),
        ("the window unmapped", window.unmap, (250, 450)),
        ("the root background changed", lambda: _repaint_root(root, 0x403020), (0, HEIGHT)),
    ]
    for what, draw, (top, bottom) in steps:
        draw()
        painter.sync()
        meta, shown = await _cached(display)
        assert shown == await _afresh(display), f"after {what}: the screenshot shows an old screen"
        most = -(-bottom // BAND_ROWS) - top // BAND_ROWS
        assert 0 < meta["bands"] - meta["bands_reused"] <= most, (what, meta)
    window.destroy()
    painter.sync()


def _repaint_root(root: Any, colour: int) -> None:
    root.change_attributes(background_pixel=colour)
    root.clear_area()


async def test_drawing_during_screenshots_loses_no_row(display: Display, xvfb: str) -> None:
    """Another client draws all along (in rows 100 to 260) while screenshots are taken: whatever it drew between or
    during them, the screenshot taken once it stopped equals the screen."""
    stop = threading.Event()

    def draw_all_along() -> None:
        d = xdisplay.Display(xvfb)
        root, rng = d.screen().root, random.Random(7)
        try:
            while not stop.is_set():
                x, y = rng.randrange(WIDTH - 40), rng.randrange(100, 252)
                _fill(d, root, rng.randrange(1 << 24), x, y, rng.randrange(1, 40), rng.randrange(1, 8))
                d.flush()
                time.sleep(0.0002)
        finally:
            d.sync()
            d.close()

    await _cached(display)  # the first frame: all of it
    drawer = threading.Thread(target=draw_all_along)
    drawer.start()
    try:
        copied = set()
        for _ in range(150):
            meta, _ = await _cached(display)
            copied.add(meta["bands"] - meta["bands_reused"])
            await asyncio.sleep(0.002)
    finally:
        stop.set()
        await asyncio.to_thread(drawer.join, 10)
    assert max(copied) <= 260 // BAND_ROWS - 100 // BAND_ROWS + 1, f"bands copied outside the rows drawn on: {copied}"
    assert max(copied) > 0, "the drawing was never seen"
    _, shown = await _cached(display)
    assert shown == await _afresh(display), "a row drawn on during the screenshots was never copied again"


async def _zstd(display: Display) -> tuple[dict[str, Any], bytes]:
    meta, data = await display.screenshot({"format": "zstd"})
    assert (meta["format"], meta["width"], meta["height"]) == ("zstd", WIDTH, HEIGHT)
    return meta, decode(data, "zstd", WIDTH, HEIGHT).tobytes()


async def test_zstd_screenshots_show_the_screen_and_compress_again_only_when_drawn_on(
    display: Display, painter: Any
) -> None:
    root = painter.screen().root
    meta, first = await _zstd(display)
    assert first == await _afresh(display) and not meta["reused"]
    meta, again = await _zstd(display)
    assert meta["reused"] and again == first, "nothing was drawn"
    _fill(painter, root, 0xFF00FF, 10, 40, 30, 10)
    painter.sync()
    meta, shown = await _zstd(display)
    assert not meta["reused"] and shown == await _afresh(display)
    region = {"x": 10, "y": 40, "width": 30, "height": 10}
    meta, data = await display.screenshot({"format": "zstd", "region": region})
    assert decode(data, "zstd", 30, 10).getpixel((0, 0)) == (255, 0, 255)


async def test_png_and_zstd_screenshots_taken_in_turn_each_see_every_drawing(display: Display, painter: Any) -> None:
    """Each format's cache must see the rows the other's capture copied (the damage is taken once for both)."""
    root = painter.screen().root
    await _cached(display)
    await _zstd(display)
    for i, colour in enumerate((0x102030, 0x302010, 0x203010, 0x0000FF)):
        _fill(painter, root, colour, 20 * i, 30 * i, 50, 20)
        painter.sync()
        take, other = (_zstd, _cached) if i % 2 else (_cached, _zstd)
        _, shown = await take(display)
        expected = await _afresh(display)
        assert shown == expected, f"drawing {i}: the {take.__name__} screenshot shows an old screen"
        _, shown = await other(display)
        assert shown == expected, f"drawing {i}: the {other.__name__} screenshot missed what the other's copied"


def test_the_agents_display_imports_pillow_only_for_a_screenshot() -> None:
    """An idle desktop's agent (health probes through Xlib) holds no Pillow (about 0.5 MB of every desktop)."""
    code = "import sys, sandbox.agent.display.service\nprint('PIL' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
