"""Drive the sandbox's X server: screenshots (MIT-SHM when the server allows it) and input through XTEST.

python-xlib is blocking and its connection is not meant to be shared between threads, so every X call runs
on one dedicated worker thread. Screenshot encoding runs on a separate small pool.
"""

from __future__ import annotations

import asyncio
import ctypes
import io
import logging
import math
import os
import re
import select
import struct
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, TypeVar, cast

from PIL import Image
from Xlib import XK, X, Xatom
from Xlib import display as xdisplay
from Xlib import error as xerror
from Xlib.ext import xtest
from Xlib.protocol import event as xevent
from Xlib.protocol import rq
from Xlib.xobject.drawable import Window as XWindow

from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

T = TypeVar("T")

# Screenshot encoding. PNG rows are stored unfiltered and deflated at zlib level 1, the image split into
# horizontal bands compressed in parallel and concatenated into one deflate stream (as pigz does). On screen
# content this is about 4x faster than Pillow's PNG writer, whose adaptive row filters cost more than the
# compression itself, for a similar size. JPEG goes through Pillow (libjpeg) at the requested quality.
PNG_ZLIB_LEVEL = 1
PNG_BANDS = max(1, min(4, len(os.sched_getaffinity(0))))
JPEG_DEFAULT_QUALITY = 80

# Chromium counts clicks sent in one burst as separate single clicks; xdotool waits 100 ms between repeats.
MULTI_CLICK_GAP_SECONDS = 0.03
DRAG_STEPS = 10
DRAG_STEP_SECONDS = 0.015
MAX_SCROLL_CLICKS = 200
MAX_WAIT_SECONDS = 60.0
# A client translates a key with the keymap it holds when it gets to the event, and may lag far behind (Chromium
# re-reading the map after each change): keys must not be sent before it has seen a remap, nor a keycode remapped
# before it has handled the keys sent with it. A _NET_WM_PING round trip to the focused window tells when it has
# caught up; clients that don't answer pings get a fixed delay instead.
PING_TIMEOUT_SECONDS = 2.0
UNPINGABLE_SETTLE_SECONDS = 0.1

_BUTTONS = {"left": 1, "middle": 2, "right": 3}
_SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
_KEY_ALIASES = {
    "enter": "Return",
    "return": "Return",
    "esc": "Escape",
    "escape": "Escape",
    "tab": "Tab",
    "space": "space",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "ctrl": "Control_L",
    "control": "Control_L",
    "alt": "Alt_L",
    "shift": "Shift_L",
    "super": "Super_L",
    "win": "Super_L",
    "meta": "Super_L",
    "cmd": "Super_L",
    "insert": "Insert",
    "capslock": "Caps_Lock",
}

XK.load_keysym_group("xkb")
XK.load_keysym_group("xf86")


def _keysym_names() -> dict[str, int]:
    """Every keysym name python-xlib knows, lower-cased; on a clash the lower-case name wins (aacute, not Aacute)."""
    names: dict[str, int] = {}
    for attr, value in vars(XK).items():
        if attr.startswith("XK_"):
            name = attr[3:]
            key = name.lower().replace("xf86_", "xf86")  # python-xlib spells XF86AudioMute XF86_AudioMute
            if key not in names or name.islower():
                names[key] = value
    return names


_KEYSYM_NAMES = _keysym_names()


class Display:
    def __init__(self, display_name: str, *, logger: logging.Logger) -> None:
        self._name = display_name
        self._log = logger
        self._x_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="x11")
        self._encoder = ThreadPoolExecutor(max_workers=PNG_BANDS, thread_name_prefix="screenshot-encode")
        self._session: _Session | None = None  # touched only on the X thread
        self._closed = False

    async def screenshot(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        fmt = cast(str, require(args, "format", str, "png")).lower()
        if fmt == "jpg":
            fmt = "jpeg"
        if fmt not in ("png", "jpeg"):
            raise bad_request(f"argument 'format' must be 'png' or 'jpeg', got {fmt!r}")
        quality = _int_arg(args, "quality", 1, 100, JPEG_DEFAULT_QUALITY)
        region = require(args, "region", dict, None)
        started = time.perf_counter()
        image = await self._call(lambda s: s.capture(cast("dict[str, Any] | None", region)))
        captured = time.perf_counter()
        data = await (self._encode_jpeg(image, quality) if fmt == "jpeg" else self._encode_png(image))
        encoded = time.perf_counter()
        meta = {
            "width": image.width,
            "height": image.height,
            "format": fmt,
            "capture_ms": round((captured - started) * 1000, 3),
            "encode_ms": round((encoded - captured) * 1000, 3),
        }
        return meta, data

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        kind = action.get("type")
        if kind == "wait":
            seconds = require(action, "seconds", (int, float))
            if not 0 <= cast(float, seconds) <= MAX_WAIT_SECONDS:
                raise bad_request(f"argument 'seconds' must be between 0 and {MAX_WAIT_SECONDS:g}, got {seconds}")
            await asyncio.sleep(cast(float, seconds))
            return {"cursor": list(await self.cursor())}
        perform = _ACTIONS.get(kind) if isinstance(kind, str) else None
        if perform is None:
            known = ", ".join(sorted([*_ACTIONS, "wait"]))
            raise bad_request(f"unknown action type {kind!r}; known: {known}")
        # A deadline cancels the await, not the worker thread: the flag makes long actions stop early.
        stop = threading.Event()
        try:
            x, y = await self._call(lambda s: s.run(perform, action, stop))
        except asyncio.CancelledError:
            stop.set()
            raise
        return {"cursor": [x, y]}

    async def cursor(self) -> tuple[int, int]:
        return await self._call(lambda s: s.cursor())

    async def check(self) -> dict[str, Any]:
        try:
            detail = await self._call(lambda s: s.describe())
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        return {"ok": True, "detail": detail}

    async def window_manager_check(self) -> dict[str, Any]:
        try:
            ok, detail = await self._call(lambda s: s.window_manager())
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        return {"ok": ok, "detail": detail}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Runs after whatever the X thread is busy with; never blocks the caller.
        self._x_thread.submit(self._drop)
        self._x_thread.shutdown(wait=False)
        self._encoder.shutdown(wait=False)

    async def _call(self, fn: Callable[[_Session], T]) -> T:
        if self._closed:
            raise AgentError(ErrorCode.UNAVAILABLE, "the display has been closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._x_thread, self._on_x_thread, fn)

    def _on_x_thread(self, fn: Callable[[_Session], T]) -> T:
        if self._session is None:
            try:
                self._session = _Session(self._name)
            except (xerror.DisplayError, xerror.ConnectionClosedError, OSError) as e:
                raise AgentError(ErrorCode.UNAVAILABLE, f"cannot connect to X display {self._name}: {e}") from e
            self._log.info(
                "connected to X display %s (%dx%d, capture via %s)",
                self._name,
                self._session.width,
                self._session.height,
                self._session.capture_method,
            )
        try:
            return fn(self._session)
        except (xerror.ConnectionClosedError, OSError) as e:
            self._drop()
            raise AgentError(ErrorCode.UNAVAILABLE, f"lost the connection to X display {self._name}: {e}") from e

    def _drop(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    async def _encode_jpeg(self, image: Image.Image, quality: int) -> bytes:
        return await asyncio.get_running_loop().run_in_executor(self._encoder, _jpeg, image, quality)

    async def _encode_png(self, image: Image.Image) -> bytes:
        loop = asyncio.get_running_loop()
        h = image.height
        bounds = [(h * i // PNG_BANDS, h * (i + 1) // PNG_BANDS) for i in range(PNG_BANDS)]
        bounds = [(top, bottom) for top, bottom in bounds if bottom > top]
        bands = await asyncio.gather(
            *(
                loop.run_in_executor(self._encoder, _deflate_band, image, top, bottom, i == len(bounds) - 1)
                for i, (top, bottom) in enumerate(bounds)
            )
        )
        return _png(image.width, image.height, bands)


class _Session:
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
            self.keymap = _Keymap(self.d, self.root)
            self._atoms = {name: self.d.intern_atom(name) for name in ("WM_PROTOCOLS", "_NET_WM_PING")}
            self._ping_serial = 0
            self.shm = _SharedMemory.attach(self.d, self.width * self.height * 4)
        except BaseException:
            with suppress(Exception):
                self.d.close()
            raise
        self.capture_method = "MIT-SHM" if self.shm else "GetImage"

    def close(self) -> None:
        with suppress(Exception):
            self.keymap.give_back(self.d)
        if self.shm is not None:
            self.shm.detach(self.d)
        with suppress(Exception):
            self.d.close()

    # Screen

    def capture(self, region: dict[str, Any] | None) -> Image.Image:
        x, y, w, h = 0, 0, self.width, self.height
        if region is not None:
            x, y = self.point(region)
            w, h = _int_arg(region, "width", 1, self.width), _int_arg(region, "height", 1, self.height)
            if x + w > self.width or y + h > self.height:
                raise bad_request(f"region {w}x{h} at ({x}, {y}) extends past the {self.width}x{self.height} screen")
        if self.shm is not None:
            raw: Any = self.shm.get_image(self.d, self.root, x, y, w, h)
        else:
            raw = self.root.get_image(x, y, w, h, X.ZPixmap, 0xFFFFFFFF).data
        # Decoding BGRX copies the pixels, so the shared segment is free for the next capture.
        return Image.frombuffer("RGB", (w, h), raw, "raw", "BGRX", 0, 1)

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
        return True, f"window manager {wm!r} is running (check window 0x{wid:x})"

    # Input

    def run(
        self,
        perform: Callable[[_Session, dict[str, Any], threading.Event], None],
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
        return _coordinate(args, xname, self.width), _coordinate(args, yname, self.height)

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


class _Keymap:
    """The server's core keyboard map, plus spare keycodes to borrow for keysyms it lacks (xdotool's trick).

    Every keymap change makes each X client re-read the map; openbox spends ~40 ms of CPU on each, and a click
    waits for it meanwhile (its click-to-focus grab freezes the pointer until it catches up). So borrowed keycodes
    stay mapped, least recently used evicted first, and go back to NoSymbol only when the connection closes. A
    root window property lists them, so that an agent restarted on the same X server takes them over again.
    """

    def __init__(self, d: Any, root: Any) -> None:
        self._root = root
        self._property = d.intern_atom("_SANDBOX_AGENT_BORROWED_KEYCODES")
        lo, hi = d.display.info.min_keycode, d.display.info.max_keycode
        rows = dict(enumerate(d.get_keyboard_mapping(lo, hi - lo + 1), lo))
        self._width = len(rows[lo])
        listed = root.get_full_property(self._property, Xatom.CARDINAL)
        self._borrowed: OrderedDict[int, int] = OrderedDict()  # keysym -> keycode, least recently used first
        for keycode in listed.value if listed is not None else ():
            row = rows.get(keycode)
            if row is not None and row[0] != X.NoSymbol and row[0] == row[1]:
                del rows[keycode]
                self._borrowed[row[0]] = keycode
        self._codes: dict[int, tuple[int, bool]] = {}  # keysym -> (keycode, needs Shift)
        for index in (0, 1):
            for keycode, row in rows.items():
                if len(row) > index and row[index] != X.NoSymbol:
                    self._codes.setdefault(row[index], (keycode, index == 1))
        # Taken from the end, so highest first: some clients treat low spare keycodes such as 8 as reserved.
        self._free = [keycode for keycode, row in rows.items() if not any(row)]
        self.capacity = len(self._free) + len(self._borrowed)
        self.shift = self._codes[XK.XK_Shift_L][0]

    def use(self, keysym: int) -> tuple[int, bool]:
        """(keycode, needs Shift) for a keysym that is mapped; marks a borrowed one as just used."""
        if keysym in self._codes:
            return self._codes[keysym]
        self._borrowed.move_to_end(keysym)
        return self._borrowed[keysym], False

    def borrow(self, keysyms: Sequence[int], d: Any, barrier: Callable[[], None]) -> None:
        """Map the keysyms the keyboard lacks onto spare keycodes, evicting the least recently used ones."""
        wanted = {k for k in keysyms if k not in self._codes}
        missing = [k for k in dict.fromkeys(keysyms) if k in wanted and k not in self._borrowed]
        if not missing:
            return
        if len(wanted) > self.capacity:
            raise AgentError(ErrorCode.UNAVAILABLE, f"the keyboard has only {self.capacity} spare keycodes")
        if len(missing) > len(self._free):
            barrier()  # keys already sent on the keycodes about to be evicted must be handled first
        for keysym in missing:
            keycode = (
                self._free.pop()
                if self._free
                else self._borrowed.pop(next(k for k in self._borrowed if k not in wanted))
            )
            d.change_keyboard_mapping(keycode, [(keysym, keysym) + (X.NoSymbol,) * (self._width - 2)])
            self._borrowed[keysym] = keycode
        self._publish()
        barrier()

    def give_back(self, d: Any) -> None:
        for keycode in self._borrowed.values():
            d.change_keyboard_mapping(keycode, [(X.NoSymbol,) * self._width])
            self._free.append(keycode)
        self._borrowed.clear()
        self._publish()
        d.sync()

    def _publish(self) -> None:
        self._root.change_property(self._property, Xatom.CARDINAL, 32, sorted(self._borrowed.values()))

    def batches(self, keysyms: list[int]) -> Iterator[list[int]]:
        """Split a keysym sequence so that no part needs more borrowed keycodes than there are spares."""
        batch: list[int] = []
        borrowed: set[int] = set()
        for keysym in keysyms:
            if keysym not in self._codes and keysym not in borrowed:
                if len(borrowed) == self.capacity and batch:
                    yield batch
                    batch, borrowed = [], set()
                borrowed.add(keysym)
            batch.append(keysym)
        if batch:
            yield batch


# Actions. Each runs on the X thread; Display.act syncs and reads the cursor afterwards.


def _move(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move(*s.point(args))


def _click(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(_button_arg(args), _int_arg(args, "count", 1, 3, 1))


def _double_click(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(_BUTTONS["left"], 2)


def _right_click(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.click(_BUTTONS["right"])


def _drag(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    x0, y0 = s.point(args)
    x1, y1 = s.point(args, "to_x", "to_y")
    button = _button_arg(args)
    s.move(x0, y0)
    s.button(button, True)
    try:
        for step in range(1, DRAG_STEPS + 1):
            s.pause(stop, DRAG_STEP_SECONDS)
            s.move(x0 + (x1 - x0) * step // DRAG_STEPS, y0 + (y1 - y0) * step // DRAG_STEPS)
        s.pause(stop, DRAG_STEP_SECONDS)
    finally:
        s.button(button, False)


def _scroll(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    dx = _int_arg(args, "dx", -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0)
    dy = _int_arg(args, "dy", -MAX_SCROLL_CLICKS, MAX_SCROLL_CLICKS, 0)
    s.move_if_given(args)
    s.click(_SCROLL_BUTTONS["down" if dy > 0 else "up"], abs(dy), gap=0)
    s.click(_SCROLL_BUTTONS["right" if dx > 0 else "left"], abs(dx), gap=0)


def _type_text(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    text = cast(str, require(args, "text", str))
    interval = _int_arg(args, "interval_ms", 0, 5000, 0) / 1000
    keysyms = [_char_keysym(ch, i) for i, ch in enumerate(text.replace("\r\n", "\n").replace("\r", "\n"))]
    for batch in s.keymap.batches(keysyms):
        s.keymap.borrow(batch, s.d, s.barrier)
        for keysym in batch:
            s.chord([keysym])
            if interval:
                s.pause(stop, interval)
            elif stop.is_set():
                raise AgentError(ErrorCode.TIMEOUT, "action cancelled")


def _key(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(_combo(cast(str, require(args, "key", str))))


def _hotkey(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    keys = cast(list, require(args, "keys", list))
    if not keys or not all(isinstance(k, str) for k in keys):
        raise bad_request("argument 'keys' must be a non-empty list of key names")
    s.chord([_keysym(k) for k in keys])


def _key_down(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(_combo(cast(str, require(args, "key", str))), release=False)


def _key_up(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.chord(_combo(cast(str, require(args, "key", str))), press=False)


def _mouse_down(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.button(_button_arg(args), True)


def _mouse_up(s: _Session, args: dict[str, Any], stop: threading.Event) -> None:
    s.move_if_given(args)
    s.button(_button_arg(args), False)


_ACTIONS: dict[str, Callable[[_Session, dict[str, Any], threading.Event], None]] = {
    "move": _move,
    "click": _click,
    "double_click": _double_click,
    "right_click": _right_click,
    "drag": _drag,
    "scroll": _scroll,
    "type_text": _type_text,
    "key": _key,
    "hotkey": _hotkey,
    "key_down": _key_down,
    "key_up": _key_up,
    "mouse_down": _mouse_down,
    "mouse_up": _mouse_up,
}


# Arguments


def _int_arg(args: dict[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int:
    value = cast(int, require(args, name, int) if default is None else require(args, name, int, default))
    if not lo <= value <= hi:
        raise bad_request(f"argument {name!r} must be between {lo} and {hi}, got {value}")
    return value


def _coordinate(args: dict[str, Any], name: str, limit: int) -> int:
    number = cast(float, require(args, name, (int, float)))
    if not math.isfinite(number):
        raise bad_request(f"argument {name!r} must be a finite number")
    value = round(number)
    if not 0 <= value < limit:
        raise bad_request(f"argument {name!r} = {value} is outside the screen (0..{limit - 1})")
    return value


def _button_arg(args: dict[str, Any]) -> int:
    name = cast(str, require(args, "button", str, "left"))
    if name not in _BUTTONS:
        raise bad_request(f"argument 'button' must be one of {', '.join(_BUTTONS)}, got {name!r}")
    return _BUTTONS[name]


def _char_keysym(ch: str, position: int | None = None) -> int:
    if ch == "\n":
        return XK.XK_Return
    if ch == "\t":
        return XK.XK_Tab
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0:
        where = "" if position is None else f" at position {position}"
        raise bad_request(f"control character {ch!r}{where} cannot be typed")
    # Latin-1 keysyms equal their code points; everything else has a Unicode keysym.
    return code if code <= 0xFF else 0x01000000 | code


def _keysym(name: str) -> int:
    if len(name) == 1:
        return _char_keysym(name)
    keysym = XK.string_to_keysym(_KEY_ALIASES.get(name.lower(), name))
    if keysym == X.NoSymbol:
        keysym = _KEYSYM_NAMES.get(name.lower(), X.NoSymbol)
    if keysym == X.NoSymbol:
        aliases = ", ".join(sorted({*_KEY_ALIASES, "f1..f12"}))
        raise bad_request(f"unknown key {name!r}; use an X keysym name (Return, BackSpace, F5, a) or one of: {aliases}")
    return cast(int, keysym)


def _combo(key: str) -> list[int]:
    """'ctrl+shift+t' -> keysyms; a '+' not followed by anything is the plus key itself ('ctrl++')."""
    if not key:
        raise bad_request("argument 'key' must not be empty")
    return [_keysym(part.strip() or part) for part in re.split(r"\+(?=.)", key)]


# Encoding (runs on the encoder pool)


def _jpeg(image: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def _deflate_band(image: Image.Image, top: int, bottom: int, last: bool) -> tuple[bytes, int, int]:
    """Deflate rows [top, bottom) with PNG filter type 0; returns (raw deflate data, adler32, length)."""
    stride = image.width * 3
    pixels = image.crop((0, top, image.width, bottom)).tobytes()
    rows = b"".join([b"\0" + pixels[i : i + stride] for i in range(0, len(pixels), stride)])
    deflater = zlib.compressobj(PNG_ZLIB_LEVEL, zlib.DEFLATED, -15)
    # A sync flush ends a band on a byte boundary without closing the stream, so bands concatenate.
    data = deflater.compress(rows) + deflater.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
    return data, zlib.adler32(rows), len(rows)


def _png(width: int, height: int, bands: Sequence[tuple[bytes, int, int]]) -> bytes:
    checksum = bands[0][1]
    for _, adler, length in bands[1:]:
        checksum = _adler32_combine(checksum, adler, length)
    idat = b"\x78\x01" + b"".join(band[0] for band in bands) + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))


def _adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """Adler-32 of A+B from those of A and B (zlib's adler32_combine, which Python does not expose)."""
    base = 65521
    rem = length2 % base
    sum1 = adler1 & 0xFFFF
    sum2 = rem * sum1 % base
    sum1 += (adler2 & 0xFFFF) + base - 1
    sum2 += (adler1 >> 16) + (adler2 >> 16) + base - rem
    return (sum1 % base) | ((sum2 % base) << 16)


# MIT-SHM, which python-xlib does not implement: the request layouts from the X11 shm protocol spec.


class _ShmAttach(rq.Request):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(1),
        rq.RequestLength(),
        rq.Card32("shmseg"),
        rq.Card32("shmid"),
        rq.Bool("read_only"),
        rq.Pad(3),
    )


class _ShmDetach(rq.Request):
    _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(2), rq.RequestLength(), rq.Card32("shmseg"))


class _ShmGetImage(rq.ReplyRequest):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(4),
        rq.RequestLength(),
        rq.Drawable("drawable"),
        rq.Int16("x"),
        rq.Int16("y"),
        rq.Card16("width"),
        rq.Card16("height"),
        rq.Card32("plane_mask"),
        rq.Card8("format"),
        rq.Pad(3),
        rq.Card32("shmseg"),
        rq.Card32("offset"),
    )
    _reply = rq.Struct(
        rq.ReplyCode(),
        rq.Card8("depth"),
        rq.Card16("sequence_number"),
        rq.ReplyLength(),
        rq.Card32("visual"),
        rq.Card32("size"),
        rq.Pad(16),
    )


_IPC_PRIVATE = 0
_IPC_CREAT = 0o1000
_IPC_RMID = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmat.restype = ctypes.c_void_p
_libc.shmdt.argtypes = [ctypes.c_void_p]
_libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]


class _SharedMemory:
    """A SysV shared-memory segment the X server copies screen pixels into: one memcpy instead of
    streaming ~4 MB through the socket (python-xlib's reply reading costs ~10 ms for a 1280x800 frame)."""

    def __init__(self, opcode: int, segment: int, address: int, size: int) -> None:
        self._opcode = opcode
        self._segment = segment
        self._address = address
        self._size = size

    @classmethod
    def attach(cls, d: Any, size: int) -> _SharedMemory | None:
        """None when the server can't share memory with us (no MIT-SHM, another IPC namespace, another user)."""
        extension = d.query_extension("MIT-SHM")
        if extension is None:
            return None
        opcode = extension.major_opcode
        shmid = _libc.shmget(_IPC_PRIVATE, size, _IPC_CREAT | 0o600)
        if shmid < 0:
            return None
        address = _libc.shmat(shmid, None, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            _libc.shmctl(shmid, _IPC_RMID, None)
            return None
        segment = d.display.allocate_resource_id()
        catcher = xerror.CatchError()
        _ShmAttach(display=d.display, onerror=catcher, opcode=opcode, shmseg=segment, shmid=shmid, read_only=False)
        d.sync()
        # Marked for removal now; the kernel frees it once both sides have detached (or died).
        _libc.shmctl(shmid, _IPC_RMID, None)
        if catcher.get_error() is not None:
            _libc.shmdt(address)
            return None
        return cls(opcode, segment, address, size)

    def get_image(self, d: Any, drawable: Any, x: int, y: int, width: int, height: int) -> Any:
        reply = _ShmGetImage(
            display=d.display,
            opcode=self._opcode,
            drawable=drawable,
            x=x,
            y=y,
            width=width,
            height=height,
            plane_mask=0xFFFFFFFF,
            format=X.ZPixmap,
            shmseg=self._segment,
            offset=0,
        )
        return (ctypes.c_char * reply.size).from_address(self._address)

    def detach(self, d: Any) -> None:
        with suppress(Exception):
            _ShmDetach(display=d.display, opcode=self._opcode, shmseg=self._segment)
            d.sync()
        _libc.shmdt(self._address)
