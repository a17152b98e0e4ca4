"""``AndroidDriver``: what the agent's ``screenshot``, ``action``, ``health`` and ``android`` ops call in an
android sandbox. Screenshots and input go through the emulator's gRPC controller when it answers (and grpcio is
installed), ADB otherwise; the rest (open_app, the accessibility tree, readiness, recording) through ADB; resets
load an emulator snapshot through the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import struct
import time
from dataclasses import dataclass
from typing import Any, cast

from sandbox.agent.android.adb import Adb
from sandbox.agent.android.console import Console
from sandbox.agent.android.mapping import Op, translate
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

BOOT_TIMEOUT_S = 300.0
DEFAULT_SNAPSHOT = "default_boot"
"""The quickboot snapshot the emulator saves at start (``-snapshot`` names another)."""


@dataclass(frozen=True)
class AndroidConfig:
    serial: str = "emulator-5554"
    grpc: str = "127.0.0.1:8554"
    """The emulator's gRPC controller (``-grpc 8554``); "": ADB only."""
    grpc_token: str | None = None
    adb: str = "adb"
    adb_server_port: int | None = None
    console_port: int = 5554
    snapshot: str = DEFAULT_SNAPSHOT

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AndroidConfig:
        e = os.environ if env is None else env
        port = e.get("ANDROID_ADB_SERVER_PORT")
        return cls(
            serial=e.get("SANDBOX_ANDROID_SERIAL", cls.serial),
            grpc=e.get("SANDBOX_ANDROID_GRPC", cls.grpc),
            grpc_token=e.get("SANDBOX_ANDROID_GRPC_TOKEN") or None,
            adb=e.get("SANDBOX_ANDROID_ADB", cls.adb),
            adb_server_port=int(port) if port else None,
            console_port=int(e.get("SANDBOX_ANDROID_CONSOLE_PORT", str(cls.console_port))),
            snapshot=e.get("SANDBOX_ANDROID_SNAPSHOT", cls.snapshot),
        )


def png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise AgentError(ErrorCode.UNAVAILABLE, "the screenshot is not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _grpc_controller(config: AndroidConfig, logger: logging.Logger) -> Any:
    if not config.grpc:
        return None
    try:
        from sandbox.agent.android.grpc_controller import GrpcController
    except ImportError as e:  # no grpcio in this image: ADB only
        logger.warning("gRPC controller unavailable (%s); using ADB", e)
        return None
    return GrpcController(config.grpc, token=config.grpc_token)


class AndroidDriver:
    def __init__(self, config: AndroidConfig, *, logger: logging.Logger, grpc: Any = None) -> None:
        self.config = config
        self._log = logger
        self.adb = Adb(config.serial, adb=config.adb, server_port=config.adb_server_port)
        self.console = Console(config.console_port)
        self.grpc = grpc if grpc is not None else _grpc_controller(config, logger)
        self._grpc_ok = self.grpc is not None
        self._last: tuple[int, int] | None = None

    @classmethod
    def from_env(cls, *, logger: logging.Logger) -> AndroidDriver:
        return cls(AndroidConfig.from_env(), logger=logger)

    @property
    def via(self) -> str:
        return "grpc" if self._grpc_ok else "adb"

    async def _grpc(self, call: Any) -> bool:
        """Run ``call(grpc)`` if the controller answers; False (and ADB from then on) if it does not."""
        if not self._grpc_ok:
            return False
        try:
            await call(self.grpc)
            return True
        except Exception as e:  # grpc.aio.AioRpcError and friends: fall back rather than fail the action
            self._log.warning("gRPC controller %s failed (%s); falling back to ADB", self.config.grpc, e)
            self._grpc_ok = False
            return False

    # ------------------------------------------------------------------ the ops

    async def screenshot(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        fmt = cast(str, require(args, "format", str, "png")).lower()
        fmt = "jpeg" if fmt == "jpg" else fmt
        if fmt not in ("png", "jpeg"):
            raise bad_request(f"argument 'format' must be 'png' or 'jpeg', got {fmt!r}")
        started = time.perf_counter()
        shot: list[bytes] = []

        async def grab(g: Any) -> None:
            shot.append((await g.screenshot())[0])

        via = "grpc" if await self._grpc(grab) else "adb"
        data = shot[0] if shot else await self.adb.screenshot()
        captured = time.perf_counter()
        width, height = png_size(data)
        if fmt == "jpeg":
            data = await asyncio.to_thread(_to_jpeg, data, int(require(args, "quality", int, 80)))
        meta = {
            "width": width,
            "height": height,
            "format": fmt,
            "via": via,
            "capture_ms": round((captured - started) * 1000, 3),
            "encode_ms": round((time.perf_counter() - captured) * 1000, 3),
        }
        return meta, data

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        for op in translate(action, self._last):
            await self.perform(op)
        return {"cursor": list(self._last)} if self._last else {}

    async def perform(self, op: Op) -> None:
        a = op.args
        if "x" in a:
            self._last = (a["to_x"], a["to_y"]) if "to_x" in a else (a["x"], a["y"])
        if op.name == "point":
            return
        if op.name == "wait":
            await asyncio.sleep(float(a["seconds"]))
        elif op.name == "tap":
            if not await self._grpc(lambda g: g.tap(a["x"], a["y"])):
                await self.adb.tap(a["x"], a["y"])
        elif op.name == "long_press":
            if not await self._grpc(lambda g: g.tap(a["x"], a["y"], hold_s=a["ms"] / 1000)):
                await self.adb.long_press(a["x"], a["y"], a["ms"])
        elif op.name == "swipe":
            if not await self._grpc(lambda g: g.swipe(a["x"], a["y"], a["to_x"], a["to_y"], a["ms"] / 1000)):
                await self.adb.swipe(a["x"], a["y"], a["to_x"], a["to_y"], a["ms"])
        elif op.name == "text":
            # The controller sends printable ASCII only; anything else goes through `input text`.
            if not (a["text"].isascii() and await self._grpc(lambda g: g.text(a["text"]))):
                await self.adb.text(a["text"])
        elif op.name == "key":
            if not await self._grpc(lambda g: g.key(a["w3c"])):
                await self.adb.keyevent(a["keycode"])
        elif op.name == "open_app":
            out = await self.adb.open_app(a["package"], a["activity"])
            if "No activities found" in out or "Error" in out:
                raise bad_request(f"cannot open {a['package']}: {out.strip()[:300]}")
        else:
            raise AgentError(ErrorCode.INTERNAL, f"unknown android op {op.name!r}")

    async def check(self) -> dict[str, Any]:
        """Health: the device has booted (``sys.boot_completed``), and how it is driven."""
        try:
            booted = await self.adb.boot_completed()
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        return {"ok": booted, "detail": f"booted, input via {self.via}" if booted else "still booting"}

    async def wait_ready(self, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Wait for ``sys.boot_completed=1``; the seconds it took."""
        started = time.monotonic()
        while True:
            try:
                if await self.adb.boot_completed():
                    return round(time.monotonic() - started, 3)
            except AgentError:
                pass  # adb: device offline / not found while the emulator starts
            if time.monotonic() - started > timeout:
                raise AgentError(ErrorCode.TIMEOUT, f"the emulator did not finish booting within {timeout:g} s")
            await asyncio.sleep(1.0)

    async def reset(self, args: dict[str, Any]) -> dict[str, Any]:
        """Load the quickboot (or named) snapshot, then wait until the device is ready again."""
        name = cast(str, require(args, "snapshot", str, self.config.snapshot))
        if not name or any(c.isspace() for c in name):
            raise bad_request(f"invalid snapshot name {name!r}")
        started = time.monotonic()
        await self.console.snapshot_load(name)
        self._last = None
        ready = await self.wait_ready(float(require(args, "timeout", (int, float), BOOT_TIMEOUT_S)))
        return {"snapshot": name, "reset_s": round(time.monotonic() - started, 3), "ready_s": ready}

    async def request(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The ``android`` op: ``{"op": "ui_tree" | "ready" | "reset" | "record_start" | "record_stop"}``."""
        op = require(args, "op", str)
        if op == "ui_tree":
            return {"format": "uiautomator-xml"}, (await self.adb.ui_tree()).encode()
        if op == "ready":
            timeout = float(require(args, "timeout", (int, float), BOOT_TIMEOUT_S))
            return {"ready_s": await self.wait_ready(timeout)}, b""
        if op == "reset":
            return await self.reset(args), b""
        if op == "record_start":
            await self.adb.record_start()
            return {"recording": True}, b""
        if op == "record_stop":
            return {"recording": False, "format": "mp4"}, await self.adb.record_stop()
        raise bad_request(f"unknown android op {op!r}; known: ui_tree, ready, reset, record_start, record_stop")

    def close(self) -> None:
        if self.grpc is not None:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing left to close with
                asyncio.get_running_loop().create_task(self.grpc.close())


def _to_jpeg(png: bytes, quality: int) -> bytes:
    try:
        from PIL import Image
    except ImportError as e:
        raise bad_request("jpeg screenshots need python3-pil in the image; ask for png") from e
    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").save(out, "JPEG", quality=max(1, min(100, quality)))
    return out.getvalue()
