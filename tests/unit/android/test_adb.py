"""The android driver's ADB path against Debian's real ``adb`` client (apt-get install adb), which talks the adb
host protocol to a fake adb server on 127.0.0.1; and resets through a fake emulator console."""

from __future__ import annotations

import logging
import shutil
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandbox.agent.android.adb import Adb, input_text_arg
from sandbox.agent.android.console import Console
from sandbox.agent.android.driver import AndroidConfig, AndroidDriver
from sandbox.agent.errors import AgentError
from tests.unit.android_fakes import FakeAdbServer, FakeConsole

UI_XML = '<?xml version="1.0" encoding="UTF-8"?><hierarchy rotation="0"><node text="Settings"/></hierarchy>'


def tiny_png(width: int = 3, height: int = 2) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def device(command: str) -> bytes:
    if command == "getprop sys.boot_completed":
        return b"1\n"
    if command == "screencap -p":
        return tiny_png()
    if command.startswith("uiautomator dump"):
        return b"UI hierchary dumped to: /sdcard/x.xml\n" + UI_XML.encode()
    if command.startswith("monkey -p com.missing"):
        return b"** No activities found to run, monkey aborted.\n"
    return b""


@pytest.fixture
async def adb_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAdbServer]:
    if shutil.which("adb") is None:  # a missing client fails the test: it is never a reason to skip
        pytest.fail("Debian's adb client is not installed: apt-get install adb (scripts/setup.sh installs it)")
    monkeypatch.setenv("HOME", str(tmp_path))  # adb keeps nothing of ours
    monkeypatch.delenv("ADB_SERVER_SOCKET", raising=False)
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    server = await FakeAdbServer(reply=device).start()
    yield server
    await server.stop()


def driver_for(server: FakeAdbServer, console_port: int = 1) -> AndroidDriver:
    config = AndroidConfig(grpc="", adb_server_port=server.port, console_port=console_port)
    return AndroidDriver(config, logger=logging.getLogger("test"))


async def test_adb_client_runs_guest_commands(adb_server: FakeAdbServer) -> None:
    adb = Adb("emulator-5554", server_port=adb_server.port)
    assert await adb.boot_completed()
    assert "host:version" in adb_server.requests
    assert any(r.endswith("emulator-5554") for r in adb_server.requests if r.startswith("host:t"))


async def test_an_unknown_device_is_unavailable(adb_server: FakeAdbServer) -> None:
    with pytest.raises(AgentError, match="not found") as e:
        await Adb("emulator-9999", server_port=adb_server.port).shell("true")
    assert e.value.code == "unavailable"


async def test_actions_become_input_commands(adb_server: FakeAdbServer) -> None:
    driver = driver_for(adb_server)
    await driver.act({"type": "click", "x": 10, "y": 20})
    await driver.act({"type": "double_click", "x": 1, "y": 2})
    await driver.act({"type": "drag", "x": 1, "y": 2, "to_x": 30, "to_y": 40})
    await driver.act({"type": "long_press", "x": 5, "y": 6, "duration_ms": 900})
    await driver.act({"type": "type_text", "text": "hi there"})
    await driver.act({"type": "key", "key": "Return"})
    await driver.act({"type": "key", "key": "app_switch"})
    result = await driver.act({"type": "scroll", "x": 100, "y": 500, "dy": 2})
    await driver.act({"type": "open_app", "package": "com.android.settings"})
    assert adb_server.commands == [
        "input tap 10 20",
        "input tap 1 2",
        "input tap 1 2",
        "input swipe 1 2 30 40 300",
        "input swipe 5 6 5 6 900",
        "input text hi%sthere",
        "input keyevent KEYCODE_ENTER",
        "input keyevent KEYCODE_APP_SWITCH",
        "input swipe 100 500 100 260 300",
        "monkey -p com.android.settings -c android.intent.category.LAUNCHER 1",
    ]
    assert result == {"cursor": [100, 260]}


async def test_open_app_of_a_missing_package_is_refused(adb_server: FakeAdbServer) -> None:
    with pytest.raises(AgentError, match=r"cannot open com\.missing\.app"):
        await driver_for(adb_server).act({"type": "open_app", "package": "com.missing.app"})


async def test_screenshot_readiness_and_ui_tree(adb_server: FakeAdbServer) -> None:
    driver = driver_for(adb_server)
    meta, data = await driver.screenshot({"format": "png"})
    assert (meta["width"], meta["height"], meta["format"], meta["via"]) == (3, 2, "png", "adb")
    assert data == tiny_png()
    assert await driver.check() == {"ok": True, "detail": "booted, input via adb"}
    meta, xml = await driver.request({"op": "ui_tree"})
    assert xml.decode() == UI_XML and meta == {"format": "uiautomator-xml"}
    ready, _ = await driver.request({"op": "ready", "timeout": 5})
    assert ready["ready_s"] >= 0


async def test_reset_loads_the_snapshot_then_waits_for_boot(adb_server: FakeAdbServer, tmp_path: Path) -> None:
    console = await FakeConsole(token="s3cret").start()
    try:
        driver = driver_for(adb_server, console.port)
        driver.console = Console(console.port, token_file=tmp_path / "token")
        (tmp_path / "token").write_text("s3cret\n")
        result, _ = await driver.request({"op": "reset"})
        assert result["snapshot"] == "default_boot"
        assert console.lines == ["auth s3cret", "avd snapshot load default_boot", "quit"]
        with pytest.raises(AgentError, match="snapshot nope not found"):
            await driver.reset({"snapshot": "nope"})
        with pytest.raises(AgentError, match="invalid snapshot name"):
            await driver.reset({"snapshot": "a b"})
    finally:
        await console.stop()


def test_input_text_is_one_shell_word() -> None:
    assert input_text_arg("a b") == "a%sb"
    assert input_text_arg("it's; rm -rf /") == "'it'\"'\"'s;%srm%s-rf%s/'"
