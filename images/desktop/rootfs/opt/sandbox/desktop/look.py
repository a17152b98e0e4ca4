"""The desktop's look, before the window manager starts (images/desktop/entrypoint.sh): paints the wallpaper, then
waits (up to ``--wait`` seconds) until the panel has drawn itself, so that the desktop's first screenshot shows both.

The wallpaper is a vertical gradient drawn once into a tile one screen high and 16 pixels wide, which the X server
repeats across the root window: 51 KB at 1280x800, where a screen-sized picture would hold 4 MB in every desktop's X
server. The tile outlives this program (RetainPermanent). The panel (tint2, started just before this) maps its window
some time before it draws into it; drawn, its window shows more than one colour.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from Xlib import X, display, error

TOP = (0x2B, 0x4C, 0x6F)
BOTTOM = (0x0E, 0x1A, 0x2B)
TILE_WIDTH = 16
PANEL_CLASS = "tint2"
POLL_S = 0.02


def blend(t: float) -> int:
    """The 24-bit pixel ``t`` of the way from ``TOP`` to ``BOTTOM``."""
    r, g, b = (round(a + (z - a) * t) for a, z in zip(TOP, BOTTOM, strict=True))
    return (r << 16) | (g << 8) | b


def paint_wallpaper(d: display.Display) -> None:
    screen = d.screen()
    root, height = screen.root, screen.height_in_pixels
    tile = root.create_pixmap(TILE_WIDTH, height, screen.root_depth)
    gc = tile.create_gc()
    top, colour = 0, blend(0.0)
    for y in range(1, height + 1):  # one rectangle per band of rows of one colour
        now = blend(y / max(1, height - 1)) if y < height else -1
        if now != colour:
            gc.change(foreground=colour)
            tile.fill_rectangle(gc, 0, top, TILE_WIDTH, y - top)
            top, colour = y, now
    gc.free()
    root.change_attributes(background_pixmap=tile)
    root.clear_area(0, 0, 0, 0)
    d.set_close_down_mode(X.RetainPermanent)
    d.sync()


def _top_levels(d: display.Display) -> list[Any]:
    """The root's children, and theirs: once the window manager runs, a client window sits in its frame."""
    found = []
    for window in d.screen().root.query_tree().children:
        found.append(window)
        try:
            found.extend(window.query_tree().children)
        except error.XError:
            continue  # gone meanwhile
    return found


def panel_drawn(d: display.Display, *, managed: bool = False) -> bool:
    """A mapped top-level window of the panel's class (in its window manager's frame or not) shows more than one
    colour; with ``managed``, only once the window manager has taken it in (it set the window's ``WM_STATE``, as
    ICCCM asks of it), which makes the panel draw itself again."""
    wm_state = d.get_atom("WM_STATE")  # cached by python-xlib: polled every 20 ms, asked of the X server once
    for window in _top_levels(d):
        try:
            wm_class = window.get_wm_class()
            if not wm_class or wm_class[0] != PANEL_CLASS:
                continue
            if window.get_attributes().map_state != X.IsViewable:
                continue
            if managed and window.get_full_property(wm_state, X.AnyPropertyType) is None:
                continue
            g = window.get_geometry()
            pixels = window.get_image(0, 0, g.width, g.height, X.ZPixmap, 0xFFFFFFFF).data
        except error.XError:
            continue  # gone meanwhile
        if pixels.count(pixels[:4]) * 4 != len(pixels):
            return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for the panel to draw (0: not)")
    parser.add_argument(
        "--panel-only", action="store_true", help="paint no wallpaper: wait for the panel the window manager took in"
    )
    args = parser.parse_args()
    d = display.Display()
    try:
        if not args.panel_only:
            paint_wallpaper(d)
        deadline = time.monotonic() + args.wait
        while args.wait > 0 and not panel_drawn(d, managed=args.panel_only):
            if time.monotonic() > deadline:
                print(f"the panel did not draw itself within {args.wait:g} s", file=sys.stderr)
                return 1
            time.sleep(POLL_S)
        return 0
    finally:
        d.close()


if __name__ == "__main__":
    sys.exit(main())
