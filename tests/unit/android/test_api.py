"""Android sandboxes through the platform's API, end to end in-process: the SDK over gRPC (and the REST app) ->
the service -> the fake backend, whose android instance is the real agent (``--kind android``) driving Debian's
real ``adb`` client against a fake adb server, and resetting through a fake emulator console. Covers the android
actions' routing, the refusals of wrong kinds, the in-place (emulator snapshot) reset, and android tasks."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.models import Click, Hotkey, Key, KeyDown, KeyUp, MouseDown, MouseUp, Navigate, TypeText
from sandbox.models.android import LongPress, OpenApp, Swipe, Tap
from sandbox.tasks import Task
from tests.unit.android.test_adb import UI_XML, tiny_png
from tests.unit.android_fakes import FakeAdbServer, FakeConsole
from tests.unit.conftest import ALPHA

TASK_FILE = Path(__file__).resolve().parents[3] / "tasks" / "android" / "android-wifi-off.json"
ANDROID_EXAMPLES: list[Tap | LongPress | Swipe | OpenApp] = [
    Tap(x=10, y=20),
    LongPress(x=5, y=6, duration_ms=900),
    Swipe(x=1, y=2, to_x=30, to_y=40, duration_ms=250),
    OpenApp(package="com.android.settings"),
]


class Device:
    """What the fake adb server answers: a phone with Wi-Fi on and Settings in front."""

    def __init__(self) -> None:
        self.wifi = True

    def __call__(self, command: str) -> bytes:
        if command == "getprop sys.boot_completed":
            return b"1\n"
        if command == "screencap -p":
            return tiny_png()
        if command.startswith("uiautomator dump"):
            return b"UI hierchary dumped to: /sdcard/x.xml\n" + UI_XML.encode()
        if command == "dumpsys activity activities":
            return b"  topResumedActivity=ActivityRecord{5c2e u0 com.android.settings/.Settings t7}\n"
        if command.startswith("svc wifi "):
            self.wifi = command.endswith("enable")
            return b""
        if command == "settings get global wifi_on":
            return b"1\n" if self.wifi else b"0\n"
        if command.startswith("monkey -p com.missing"):
            return b"** No activities found to run, monkey aborted.\n"
        return b""


@pytest_asyncio.fixture(scope="module")
async def device(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[FakeAdbServer, FakeConsole, Device]]:
    if shutil.which("adb") is None:  # a missing client fails the test: it is never a reason to skip
        pytest.fail("Debian's adb client is not installed: apt-get install adb (scripts/setup.sh installs it)")
    phone = Device()
    server = await FakeAdbServer(reply=phone).start()
    console = await FakeConsole().start()
    yield server, console, phone
    await console.stop()
    await server.stop()


def android_env(device: tuple[FakeAdbServer, FakeConsole, Device], home: Path) -> dict[str, str]:
    server, console, _ = device
    return {
        "ANDROID_ADB_SERVER_PORT": str(server.port),
        "SANDBOX_ANDROID_CONSOLE_PORT": str(console.port),
        "SANDBOX_ANDROID_GRPC": "",  # ADB only: no emulator gRPC controller here
        "HOME": str(home),  # adb's and the console token's home: a fresh one, no token
    }


@pytest_asyncio.fixture(scope="module")
async def phone(
    alpha: AsyncClient, device: tuple[FakeAdbServer, FakeConsole, Device], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AsyncSandbox]:
    sb = await alpha.create("android", env=android_env(device, tmp_path_factory.mktemp("home")))
    yield sb
    await sb.close()


@pytest_asyncio.fixture(scope="module")
async def terminal(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    sb = await alpha.create("terminal")
    yield sb
    await sb.close()


def device_commands(server: FakeAdbServer, since: int) -> list[str]:
    return [c for c in server.commands[since:] if c.startswith(("input ", "monkey ", "am start"))]


async def test_android_actions_step_through_grpc(
    phone: AsyncSandbox, device: tuple[FakeAdbServer, FakeConsole, Device]
) -> None:
    server = device[0]
    since = len(server.commands)
    for action in ANDROID_EXAMPLES:
        await phone.step(action)
    await phone.step({"type": "open_app", "package": "com.example.app", "activity": ".Main"})  # a dict, as JSON has it
    await phone.step(TypeText(text="hi there"))
    for key in ("back", "home", "enter", "app_switch"):
        await phone.step(Key(key=key))
    obs = await phone.step(Tap(x=7, y=8), screenshot=True)
    assert obs.screenshot is not None and (obs.screenshot.width, obs.screenshot.height) == (3, 2)
    assert obs.cursor == (7, 8)
    assert device_commands(server, since) == [
        "input tap 10 20",
        "input swipe 5 6 5 6 900",
        "input swipe 1 2 30 40 250",
        "monkey -p com.android.settings -c android.intent.category.LAUNCHER 1",
        "am start -W -n com.example.app/.Main",
        "input text hi%sthere",
        "input keyevent KEYCODE_BACK",
        "input keyevent KEYCODE_HOME",
        "input keyevent KEYCODE_ENTER",
        "input keyevent KEYCODE_APP_SWITCH",
        "input tap 7 8",
    ]


@pytest.mark.parametrize("action", ANDROID_EXAMPLES, ids=lambda a: a.type)
async def test_android_actions_are_refused_elsewhere(terminal: AsyncSandbox, action: Any) -> None:
    with pytest.raises(FailedPrecondition, match=rf"unsupported action '{action.type}': it is an android action"):
        await terminal.step(action)


@pytest.mark.parametrize(
    "action",
    [KeyDown(key="a"), KeyUp(key="a"), MouseDown(), MouseUp()],
    ids=lambda a: a.type,
)
async def test_what_android_cannot_do_is_refused(phone: AsyncSandbox, action: Any) -> None:
    with pytest.raises(FailedPrecondition, match=rf"unsupported action '{action.type}' in android sandbox"):
        await phone.step(action)


async def test_refusals_the_driver_makes_and_other_kinds_actions(phone: AsyncSandbox) -> None:
    with pytest.raises(InvalidArgument, match="middle click has no meaning on android"):
        await phone.step(Click(x=1, y=2, button="middle"))
    with pytest.raises(InvalidArgument, match="has no meaning on android"):
        await phone.step(Hotkey(keys=["ctrl", "c"]))
    with pytest.raises(FailedPrecondition, match="needs a browser sandbox"):
        await phone.step(Navigate(url="https://example.org"))
    with pytest.raises(InvalidArgument, match=r"cannot open com\.missing\.app"):
        await phone.step(OpenApp(package="com.missing.app"))


async def test_rest_takes_android_actions(
    api: httpx.AsyncClient,
    phone: AsyncSandbox,
    terminal: AsyncSandbox,
    device: tuple[FakeAdbServer, FakeConsole, Device],
) -> None:
    since = len(device[0].commands)
    r = await api.post(
        f"/v1/sandboxes/{phone.id}/step", json={"action": {"type": "tap", "x": 3, "y": 4}}, headers=ALPHA
    )
    assert r.status_code == 200, r.text
    assert device_commands(device[0], since) == ["input tap 3 4"]
    r = await api.post(
        f"/v1/sandboxes/{terminal.id}/step", json={"action": {"type": "tap", "x": 3, "y": 4}}, headers=ALPHA
    )
    assert r.status_code == 409 and "android action" in r.json()["error"]["message"], r.text
    r = await api.post(
        f"/v1/sandboxes/{phone.id}/step", json={"action": {"type": "key_down", "key": "a"}}, headers=ALPHA
    )
    assert r.status_code == 409 and "in android sandbox" in r.json()["error"]["message"], r.text


async def test_reset_loads_the_emulator_snapshot_in_place(
    phone: AsyncSandbox, device: tuple[FakeAdbServer, FakeConsole, Device]
) -> None:
    console = device[1]
    await phone.files.write("notes.txt", "x")
    pid = (await phone.exec("echo $PPID")).stdout  # the agent process: the same one after the reset
    before = len(console.lines)
    info = await phone.reset()
    assert info.state.value == "running"
    assert console.lines[before:] == ["avd snapshot load default_boot", "quit"]
    assert (await phone.exec("ls -A")).stdout == ""  # the workspace (the agent's working directory) is emptied
    assert (await phone.exec("echo $PPID")).stdout == pid


async def test_an_android_task_sets_up_and_scores(
    phone: AsyncSandbox, device: tuple[FakeAdbServer, FakeConsole, Device]
) -> None:
    server, _, state = device
    task = Task.from_file(TASK_FILE)
    since = len(server.commands)
    obs = await phone.reset(task=task)
    assert obs.info["setup_steps"] == len(task.config) and obs.screenshot is not None
    assert state.wifi and "svc wifi enable" in server.commands[since:]
    assert await phone.evaluate() == 0.0  # nothing done: Wi-Fi is still on
    await phone.reset(task=task)
    await phone.step({"type": "exec", "cmd": "adb shell svc wifi disable"})  # as an agent could, from its shell
    assert not state.wifi
    assert await phone.evaluate() == 1.0


async def test_a_reset_the_emulator_cannot_do_replaces_the_instance(
    phone: AsyncSandbox, device: tuple[FakeAdbServer, FakeConsole, Device]
) -> None:
    console = device[1]
    pid = (await phone.exec("echo $PPID")).stdout
    console.snapshots = ()  # the console answers "KO: snapshot default_boot not found"
    try:
        info = await phone.reset()
    finally:
        console.snapshots = ("default_boot",)
    assert info.state.value == "running"
    assert (await phone.exec("echo $PPID")).stdout != pid  # a new agent: a new instance
    await phone.step(Tap(x=1, y=1))


def test_the_service_refuses_what_the_table_refuses() -> None:
    from sandbox.agent.android.mapping import MAPPING
    from sandbox.models.android import ANDROID_REFUSED

    assert {name for name, what in MAPPING.items() if what.startswith("refused")} == set(ANDROID_REFUSED)
