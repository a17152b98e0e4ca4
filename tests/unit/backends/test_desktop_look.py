"""The desktop image's look.py (``images/desktop/rootfs/opt/sandbox/desktop/look.py``) against a real Xvfb: when the
panel counts as drawn, and that its 20 ms poll asks the X server for the ``WM_STATE`` atom once, not every time."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from Xlib import X
from Xlib import display as xdisplay
from Xlib.protocol import request

from tests.unit.xvfb import running_xvfb

LOOK = Path(__file__).resolve().parents[3] / "images/desktop/rootfs/opt/sandbox/desktop/look.py"


@pytest.fixture
def look() -> ModuleType:
    spec = importlib.util.spec_from_file_location("desktop_look", LOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def x() -> Iterator[xdisplay.Display]:
    with running_xvfb(320, 240) as name:
        d = xdisplay.Display(name)
        try:
            yield d
        finally:
            d.close()


def panel(d: xdisplay.Display, *, colours: int) -> Any:
    """A mapped window of tint2's class, filled with ``colours`` colours side by side."""
    screen = d.screen()
    window = screen.root.create_window(0, 0, 40, 10, 0, screen.root_depth, background_pixel=screen.black_pixel)
    window.set_wm_class("tint2", "Tint2")
    window.map()
    gc = window.create_gc()
    for i in range(colours):
        gc.change(foreground=0x203040 * (i + 1))
        window.fill_rectangle(gc, i * 40 // colours, 0, 40 // colours + 1, 10)
    d.sync()
    return window


def test_the_panel_is_drawn_once_it_shows_two_colours_and_managed_once_it_has_wm_state(
    look: ModuleType, x: xdisplay.Display
) -> None:
    assert not look.panel_drawn(x)
    plain = panel(x, colours=1)
    assert not look.panel_drawn(x)  # mapped, not drawn yet: one colour
    plain.destroy()
    drawn = panel(x, colours=2)
    assert look.panel_drawn(x) and not look.panel_drawn(x, managed=True)
    wm_state = x.intern_atom("WM_STATE")  # as the window manager sets it, taking the window in
    drawn.change_property(wm_state, wm_state, 32, [1, X.NONE])
    x.sync()
    assert look.panel_drawn(x, managed=True)


def test_polling_asks_the_x_server_for_wm_state_once(
    look: ModuleType, x: xdisplay.Display, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    class Counted(request.InternAtom):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            asked.append(kwargs.get("name", "?"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(request, "InternAtom", Counted)
    for _ in range(50):  # a second of the entrypoint's 20 ms polls, before the panel maps
        assert not look.panel_drawn(x, managed=True)
    assert asked.count("WM_STATE") <= 1
