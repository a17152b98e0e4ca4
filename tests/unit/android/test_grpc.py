"""The android driver's gRPC client against a test server generated from the emulator controller's proto (the
subset the agent ships, wire-compatible with AOSP's emulator_controller.proto), on 127.0.0.1."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_tools import protoc

from sandbox.agent.android import wire
from sandbox.agent.android.driver import AndroidConfig, AndroidDriver
from sandbox.agent.android.grpc_controller import GrpcController
from tests.unit.android.test_adb import tiny_png

PROTO = Path(__file__).resolve().parents[3] / "sandbox/agent/android/emulator_controller.proto"


@pytest.fixture(scope="module")
def pb(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    out = tmp_path_factory.mktemp("emu_proto")
    include = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(
        ["protoc", f"-I{PROTO.parent}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", PROTO.name]
    )
    assert rc == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("emulator_controller_pb2"), importlib.import_module(
            "emulator_controller_pb2_grpc"
        )
    finally:
        sys.path.remove(str(out))


class Emulator:
    """Records what it is sent; answers screenshots with a PNG and status with booted."""

    def __init__(self, pb2: ModuleType) -> None:
        self.pb2 = pb2
        self.touches: list[tuple[int, int, int, int]] = []
        self.keys: list[tuple[str, str, int]] = []
        self.formats: list[Any] = []
        self.fail = False

    async def sendTouch(self, request: Any, context: Any) -> Any:  # the proto's names
        if self.fail:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "gone")
        self.touches += [(t.x, t.y, t.identifier, t.pressure) for t in request.touches]
        return empty_pb2.Empty()

    async def sendKey(self, request: Any, context: Any) -> Any:
        self.keys.append((request.key, request.text, request.eventType))
        return empty_pb2.Empty()

    async def sendMouse(self, request: Any, context: Any) -> Any:
        return empty_pb2.Empty()

    async def getStatus(self, request: Any, context: Any) -> Any:
        return self.pb2.EmulatorStatus(version="35.1.4", uptime=1234, booted=True)

    async def getScreenshot(self, request: Any, context: Any) -> Any:
        self.formats.append(request)
        fmt = self.pb2.ImageFormat(format=request.format, width=3, height=2)
        return self.pb2.Image(format=fmt, image=tiny_png(), seq=0)


@pytest.fixture
async def emulator(pb: tuple[ModuleType, ModuleType]) -> AsyncIterator[tuple[Emulator, str]]:
    pb2, pb2_grpc = pb
    server = grpc.aio.server()
    servicer = Emulator(pb2)
    pb2_grpc.add_EmulatorControllerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield servicer, f"127.0.0.1:{port}"
    await server.stop(None)


def test_wire_messages_match_the_generated_classes(pb: tuple[ModuleType, ModuleType]) -> None:
    pb2, _ = pb
    touch = pb2.TouchEvent.FromString(wire.touch_event([(5, 6, 2, 1), (0, 0, 3, 0)], display=1))
    assert [(t.x, t.y, t.identifier, t.pressure) for t in touch.touches] == [(5, 6, 2, 1), (0, 0, 3, 0)]
    assert touch.display == 1
    key = pb2.KeyboardEvent.FromString(wire.keyboard_event(key="GoBack"))
    assert (key.key, key.eventType, key.text) == ("GoBack", pb2.KeyboardEvent.keypress, "")
    fmt = pb2.ImageFormat.FromString(wire.image_format(wire.RGB888, 640, 480))
    assert (fmt.format, fmt.width, fmt.height) == (pb2.ImageFormat.RGB888, 640, 480)
    mouse = pb2.MouseEvent.FromString(wire.mouse_event(7, 8, 1))
    assert (mouse.x, mouse.y, mouse.buttons) == (7, 8, 1)
    image = pb2.Image(format=pb2.ImageFormat(format=pb2.ImageFormat.PNG, width=3, height=2), image=b"px", seq=4)
    assert wire.parse_image(image.SerializeToString()) == (b"px", 3, 2, wire.PNG)
    status = pb2.EmulatorStatus(version="v", uptime=2**40, booted=True).SerializeToString()
    assert wire.parse_status(status) == {"version": "v", "uptime_ms": 2**40, "booted": True}
    assert wire.decode(wire.encode([(1, -1)])) == {1: [2**64 - 1]}  # int32 negatives as protobuf writes them


async def test_controller_calls(emulator: tuple[Emulator, str]) -> None:
    servicer, target = emulator
    controller = GrpcController(target)
    try:
        assert (await controller.status())["booted"] is True
        png, width, height = await controller.screenshot()
        assert (png, width, height) == (tiny_png(), 3, 2)
        await controller.tap(10, 20)
        await controller.key("GoHome")
        await controller.text("abc")
    finally:
        await controller.close()
    down, up = servicer.touches
    assert down[:2] == up[:2] == (10, 20) and down[2] == up[2] and (down[3], up[3]) == (1, 0)
    assert servicer.keys == [("GoHome", "", 2), ("", "abc", 2)]


async def test_driver_prefers_grpc(emulator: tuple[Emulator, str]) -> None:
    servicer, target = emulator
    driver = AndroidDriver(AndroidConfig(grpc=target), logger=logging.getLogger("test"))
    meta, data = await driver.screenshot({})
    assert meta["via"] == "grpc" and (meta["width"], meta["height"]) == (3, 2) and data == tiny_png()
    await driver.act({"type": "swipe", "x": 0, "y": 100, "to_x": 0, "to_y": 10, "duration_ms": 12})
    assert servicer.touches[0] == (0, 100, servicer.touches[0][2], 1)
    assert servicer.touches[-1][:2] == (0, 10) and servicer.touches[-1][3] == 0
    await driver.act({"type": "key", "key": "back"})
    await driver.act({"type": "key", "key": "BackSpace"})
    assert [k[0] for k in servicer.keys] == ["GoBack", "Backspace"]
    await driver.grpc.close()


async def test_driver_falls_back_to_adb_when_grpc_fails(emulator: tuple[Emulator, str]) -> None:
    servicer, target = emulator
    servicer.fail = True
    driver = AndroidDriver(AndroidConfig(grpc=target, adb="/nonexistent/adb"), logger=logging.getLogger("test"))
    with pytest.raises(Exception, match="cannot run adb"):
        await driver.act({"type": "tap", "x": 1, "y": 1})
    assert driver.via == "adb"
    await driver.grpc.close()
