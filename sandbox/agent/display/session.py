"""One live X connection: screen capture, cursor, window-manager probe, and input through XTEST.

Used only on the ``Display``'s X thread: python-xlib's connection is blocking and not meant to be shared.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from Xlib import X, Xatom
from Xlib import display as xdisplay
from Xlib import error as xerror
from Xlib.ext import xtest
from Xlib.protocol import event as xevent
from Xlib.xobject.drawable import Window as XWindow

from sandbox.agent.display.arguments import coordinate, int_arg
from sandbox.agent.display.damage import ScreenDamage
from sandbox.agent.display.encoders import pil
from sandbox.agent.display.keymap import Keymap
from sandbox.agent.display.xshm import SharedMemory
from sandbox.agent.errors import AgentError, bad_request
from sandbox.protocol import ErrorCode

if TYPE_CHECKING:
    from PIL import Image

# Chromium counts clicks sent in one burst as separate single clicks; xdotool waits 100 ms between repeats.
MULTI_CLICK_GAP_SECONDS = 0.03
# A client translates a key with the keymap it holds when it gets to the event, and may lag far behind (Chromium
# re-reading the map after each change): keys must not be sent before it has seen a remap, nor a keycode remapped
# before it has handled the keys sent with it. A _NET_WM_PING round trip to the focused window tells when it has
# caught up; clients that don't answer pings get a fixed delay instead.
PING_TIMEOUT_SECONDS = 2.0
UNPINGABLE_SETTLE_SECONDS = 0.1

Action = Callable[["XSession", dict[str, Any], threading.Event], None]
"""A computer action: runs on the X thread with the request's arguments and a flag set when it should stop."""


class XSession:
    """One live X connection and what was learnt from it. Used only on the X thread."""

    def __init__(self, name: str) -> None:
        self.d = xdisplay.Display(name)
        try:
            screen = self.d.screen()
            self.root = screen.root
            self.width: int = screen.width_in_pixels
            self.height: int = screen.height_in_pixels
            formats = {f.depth: f.bits_per_pixel for f in self.d.display.info.pixmap_formats}
            if formats.get(screen.root_depth) != 32 or self.d.display.info.image_byte_order != X.LSBFirst:
                raise AgentError(
                    ErrorCode.UNAVAILABLE,
                    f"X display {name} has depth {screen.root_depth}; screenshots need 24/32-bit little-endian pixels",
                )
            if not self.d.has_extension("XTEST"):
                raise AgentError(ErrorCode.UNAVAILABLE, f"X display {name} has no XTEST extension")
            self.keymap = Keymap(self.d, self.root)
            self._atoms = {name: self.d.intern_atom(name) for name in ("WM_PROTOCOLS", "_NET_WM_PING")}
            self._ping_serial = 0
            self._unseen: dict[str, tuple[int, int]] = {}  # per reader: rows another reader's capture copied
            self.shm = SharedMemory.attach(self.d, self.width * self.height * 4)
            # Without shared memory a capture streams the pixels through the socket: the whole screen each time.
            self.damage = ScreenDamage.track(self.d, self.root, self.height) if self.shm else None
        except BaseException:
            with suppress(Exception):
                self.d.close()
            raise
        self.capture_method = ("MIT-SHM, drawn rows only" if self.damage else "MIT-SHM") if self.shm else "GetImage"

    def close(self) -> None:
        with suppress(Exception):
            self.keymap.give_back(self.d)
        if self.damage is not None:
            self.damage.close()
        if self.shm is not None:
            self.shm.detach(self.d)
        with suppress(Exception):
            self.d.close()

    # Screen

    def capture(self, region: dict[str, Any] | None) -> Image.Image:
        x, y, w, h = 0, 0, self.width, self.height
        if region is not None:
            x, y = self.point(region)
            w, h = int_arg(region, "width", 1, self.width), int_arg(region, "height", 1, self.height)
            if x + w > self.width or y + h > self.height:
                raise bad_request(f"region {w}x{h} at ({x}, {y}) extends past the {self.width}x{self.height} screen")
        if self.shm is not None:
            raw: Any = self.shm.get_image(self.d, self.root, x, y, w, h)
        else:
            raw = self.root.get_image(x, y, w, h, X.ZPixmap, 0xFFFFFFFF).data
        # Decoding BGRX copies the pixels, so the shared segment is free for the next capture.
        return pil().frombuffer("RGB", (w, h), raw, "raw", "BGRX", 0, 1)

    def screen_pixels(
        self, *, whole: bool = True, align: int = 1, reader: str = "png"
    ) -> tuple[memoryview, int, int, tuple[int, int]]:
        """The screen's BGRX pixels, writable, valid until the next capture; its width, its height, and the rows
        ``[top, bottom)`` new to ``reader`` (each format's cache is one). Unless ``whole`` is asked for, only the rows
        drawn on since the last call are copied (widened to multiples of ``align``): the others hold what an earlier
        capture left there, and those an earlier capture for another reader copied count as new to this one."""
        if self.shm is None:
            data = self.root.get_image(0, 0, self.width, self.height, X.ZPixmap, 0xFFFFFFFF).data
            return memoryview(bytearray(data)), self.width, self.height, (0, self.height)
        stride = self.width * 4
        drawn = self.damage.take() if self.damage is not None else (0, self.height)
        for other, rows in self._unseen.items():
            self._unseen[other] = _union(rows, drawn)
        new = _union(self._unseen.get(reader, (0, 0)), drawn)
        self._unseen[reader] = (0, 0)
        if whole:
            drawn = new = (0, self.height)
        drawn = _aligned(drawn, align, self.height)
        if drawn[1] > drawn[0]:  # the rows another reader's capture copied are in the segment already
            self.shm.get_image(
                self.d, self.root, 0, drawn[0], self.width, drawn[1] - drawn[0], offset=drawn[0] * stride
            )
        return memoryview(self.shm.buffer()).cast("B"), self.width, self.height, _aligned(new, align, self.height)

    def cursor(self) -> tuple[int, int]:
        pointer = self.root.query_pointer()
        return pointer.root_x, pointer.root_y

    def describe(self) -> str:
        self.d.sync()
        size = f"{self.width}x{self.height}"
        return f"X display {self.d.get_display_name()} answers: {size}, capture via {self.capture_method}"

    def window_manager(self) -> tuple[bool, str]:
        check = self.d.intern_atom("_NET_SUPPORTING_WM_CHECK")
        prop = self.root.get_full_property(check, X.AnyPropertyType)
        if prop is None or not len(prop.value):
            return False, "no EWMH window manager: _NET_SUPPORTING_WM_CHECK is not set on the root window"
        wid = int(prop.value[0])
        child = self.d.create_resource_object("window", wid)
        try:
            own = child.get_full_property(check, X.AnyPropertyType)
            name = child.get_full_property(self.d.intern_atom("_NET_WM_NAME"), X.AnyPropertyType)
        except xerror.BadWindow:
            own = name = None
        if own is None or not len(own.value) or int(own.value[0]) != wid:
            return False, f"stale _NET_SUPPORTING_WM_CHECK: window 0x{wid:x} is gone (the window manager died?)"
        wm = name.value.decode(errors="replace") if name is not None and isinstance(name.value, bytes) else "unnamed"
        workarea = self.root.get_full_property(self.d.intern_atom("_NET_WORKAREA"), X.AnyPropertyType)
        if workarea is None or not len(workarea.value):
            return False, f"window manager {wm!r} is starting: it does not manage windows yet (no _NET_WORKAREA)"
        pending = self.root.get_full_property(self.d.intern_atom("_SANDBOX_SESSION_PENDING"), X.AnyPropertyType)
        if pending is not None:  # the desktop's entrypoint: its wallpaper and panel are not drawn for good yet
            return False, f"window manager {wm!r} is running; the desktop session (wallpaper, panel) is still drawing"
        return True, f"window manager {wm!r} is running (check window 0x{wid:x})"

    # Input

    def run(
        self,
        perform: Action,
        args: dict[str, Any],
        stop: threading.Event,
    ) -> tuple[int, int]:
        perform(self, args, stop)
        self.d.sync()
        # Keymap changes queue MappingNotify events nobody reads; don't let them pile up.
        while self.d.pending_events():
            self.d.next_event()
        return self.cursor()

    def point(self, args: dict[str, Any], xname: str = "x", yname: str = "y") -> tuple[int, int]:
        return coordinate(args, xname, self.width), coordinate(args, yname, self.height)

    def move_if_given(self, args: dict[str, Any]) -> None:
        if args.get("x") is not None or args.get("y") is not None:
            self.move(*self.point(args))

    def move(self, x: int, y: int) -> None:
        xtest.fake_input(self.d, X.MotionNotify, x=x, y=y)

    def button(self, button: int, down: bool) -> None:
        xtest.fake_input(self.d, X.ButtonPress if down else X.ButtonRelease, button)

    def click(self, button: int, count: int = 1, gap: float = MULTI_CLICK_GAP_SECONDS) -> None:
        for i in range(count):
            if i and gap:
                self.d.flush()
                time.sleep(gap)
            self.button(button, True)
            self.button(button, False)

    def key(self, keycode: int, down: bool) -> None:
        xtest.fake_input(self.d, X.KeyPress if down else X.KeyRelease, keycode)

    def chord(self, keysyms: Sequence[int], *, press: bool = True, release: bool = True) -> None:
        """Press keys in order and release them in reverse, adding Shift for shifted keysyms."""
        self.keymap.borrow(keysyms, self.d, self.barrier)
        codes: list[int] = []
        for keysym in keysyms:
            keycode, shifted = self.keymap.use(keysym)
            if shifted and self.keymap.shift not in codes:
                codes.append(self.keymap.shift)
            if keycode not in codes:
                codes.append(keycode)
        if press:
            for keycode in codes:
                self.key(keycode, True)
        if release:
            for keycode in reversed(codes):
                self.key(keycode, False)

    def pause(self, stop: threading.Event, seconds: float) -> None:
        self.d.flush()
        if stop.wait(seconds):
            raise AgentError(ErrorCode.TIMEOUT, "action cancelled")

    def barrier(self) -> None:
        """Wait until the client owning the keyboard focus has handled every event sent to it so far."""
        client = self._focused_client()
        if client is None or not self._ping(client):
            self.d.sync()
            time.sleep(UNPINGABLE_SETTLE_SECONDS)

    def _focused_client(self) -> Any:
        """The focused window or its nearest ancestor that answers _NET_WM_PING, if any."""
        window = self.d.get_input_focus().focus
        while isinstance(window, XWindow) and window.id != self.root.id:
            protocols = window.get_full_property(self._atoms["WM_PROTOCOLS"], Xatom.ATOM)
            if protocols is not None and self._atoms["_NET_WM_PING"] in protocols.value:
                return window
            window = window.query_tree().parent
        return None

    def _ping(self, client: Any) -> bool:
        self._ping_serial = (self._ping_serial + 1) & 0xFFFFFFFF
        stamp = self._ping_serial
        protocols, ping = self._atoms["WM_PROTOCOLS"], self._atoms["_NET_WM_PING"]
        # The answer goes to the root window for SubstructureNotify/Redirect listeners: listen while waiting.
        self.root.change_attributes(event_mask=X.SubstructureNotifyMask)
        try:
            message = xevent.ClientMessage(
                window=client, client_type=protocols, data=(32, [ping, stamp, client.id, 0, 0])
            )
            client.send_event(message, event_mask=X.NoEventMask)
            self.d.flush()
            deadline = time.monotonic() + PING_TIMEOUT_SECONDS
            while True:
                while self.d.pending_events():
                    event = self.d.next_event()
                    answer = event.type == X.ClientMessage and event.client_type == protocols
                    if answer and list(event.data[1][:2]) == [ping, stamp]:
                        return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self.d], [], [], remaining)[0]:
                    return False
        finally:
            self.root.change_attributes(event_mask=X.NoEventMask)


def _union(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    """The smallest span of rows holding both (either may be empty)."""
    if a[1] <= a[0]:
        return b
    if b[1] <= b[0]:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


def _aligned(rows: tuple[int, int], align: int, height: int) -> tuple[int, int]:
    top, bottom = rows
    if bottom <= top:
        return rows
    return top // align * align, min(height, -(-bottom // align) * align)
