"""Android tasks (``sandbox.tasks.android``): what the catalog accepts and refuses per kind, the sample task in
tasks/android/, and the setup steps and getters run through Debian's real ``adb`` client against a fake adb server
(the task runtime here runs commands on this machine, as the sandbox's agent runs them in its container)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sandbox.models import ExecResult, SandboxKind
from sandbox.tasks import Fixtures, Task, TaskError, evaluate, load_actions, run_setup
from sandbox.tasks.android import RESUMED
from tests.unit.android.test_adb import UI_XML
from tests.unit.android_fakes import FakeAdbServer

TASK_FILE = Path(__file__).resolve().parents[3] / "tasks" / "android" / "android-wifi-off.json"
SHOWN = (
    '<?xml version="1.0"?><hierarchy><node text="Wi-Fi" content-desc="">'
    '<node text="" content-desc="Off"/></node></hierarchy>'
)


class LocalRuntime:
    """A task runtime whose commands run here, with ``env`` (the fake adb server's port)."""

    kind = SandboxKind.ANDROID
    screen_width, screen_height = 1080, 1920

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.commands: list[list[str] | str] = []

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float = 60,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        self.commands.append(cmd if isinstance(cmd, str) else list(cmd))
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        proc = await asyncio.create_subprocess_exec(
            *argv, env={**os.environ, **self.env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
        return ExecResult(exit_code=proc.returncode, stdout=out.decode(), stderr=err.decode())

    async def read_file(self, path: str) -> bytes:
        raise NotImplementedError

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int:
        raise NotImplementedError

    async def browser_info(self) -> dict[str, Any]:
        raise NotImplementedError

    async def browser_tabs(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def navigate(self, url: str) -> dict[str, Any]:
        raise NotImplementedError

    async def evaluate_js(self, expression: str) -> Any:
        raise NotImplementedError


class Phone:
    def __init__(self) -> None:
        self.wifi, self.installed, self.tree = True, False, UI_XML

    def __call__(self, command: str) -> bytes:
        if command.startswith("svc wifi "):
            self.wifi = command.endswith("enable")
        if command == "settings get global wifi_on":
            return b"1\n" if self.wifi else b"0\n"
        if command == "dumpsys activity activities":
            return b"  ResumedActivity: ActivityRecord{9f u0 com.example.notes/com.example.notes.EditActivity t3}\n"
        if command.startswith("uiautomator dump"):
            return b"UI hierchary dumped to: /sdcard/x.xml\n" + self.tree.encode()
        if command.startswith("monkey -p com.missing"):
            return b"** No activities found to run, monkey aborted.\n"
        if command == "false":
            return b"nope\n"
        return b""


@pytest.fixture
async def phone(tmp_path: Path) -> AsyncIterator[tuple[FakeAdbServer, Phone, LocalRuntime]]:
    if shutil.which("adb") is None:  # a missing client fails the test: it is never a reason to skip
        pytest.fail("Debian's adb client is not installed: apt-get install adb (scripts/setup.sh installs it)")
    state = Phone()
    server = await FakeAdbServer(reply=state).start()
    runtime = LocalRuntime({"ANDROID_ADB_SERVER_PORT": str(server.port), "HOME": str(tmp_path)})
    yield server, state, runtime
    await server.stop()


def task(
    config: list[dict[str, Any]], result: Any, expected: Any, func: Any = "exact_match", kind: str = "android"
) -> Task:
    return Task.model_validate(
        {
            "id": "t",
            "instruction": "-",
            "sandbox": {"kind": kind},
            "config": config,
            "evaluator": {"func": func, "result": result, "expected": expected},
        }
    )


def rule(expected: Any) -> dict[str, Any]:
    return {"type": "rule", "rules": {"expected": expected}}


def test_the_sample_android_task_and_its_solution_load() -> None:
    sample = Task.from_file(TASK_FILE)
    assert sample.sandbox.kind is SandboxKind.ANDROID and sample.problems() == []
    assert [a.type for a in load_actions(TASK_FILE.with_suffix(".solution.jsonl"))] == ["open_app", "exec", "done"]


def test_android_steps_and_getters_need_an_android_sandbox_and_x_ones_are_refused_there() -> None:
    on_desktop = task(
        [{"type": "open_app", "parameters": {"package": "com.a.b"}}, {"type": "adb_shell", "parameters": {}}],
        {"type": "android_package"},
        rule("com.a.b"),
        kind="desktop",
    )
    assert on_desktop.problems() == [
        "config[0] (open_app): needs an android sandbox (adb, an emulator), not a desktop one",
        "config[1] (adb_shell): missing parameter 'command'",
        "config[1] (adb_shell): needs an android sandbox (adb, an emulator), not a desktop one",
        "evaluator.result: getter 'android_package' needs an android sandbox, not a desktop one",
    ]
    on_android = task(
        [
            {"type": "open", "parameters": {"path": "/tmp/a.txt"}},
            {"type": "launch", "parameters": {"command": "xterm"}},
            {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://example.org"]}},
            {"type": "execute", "parameters": {"command": "adb shell true"}},
        ],
        {"type": "clipboard"},
        rule("x"),
        func="is_in_vm_clickboard",
    )
    assert on_android.problems() == [
        "config[0] (open): needs an X desktop, which an android sandbox has not (use open_app or adb_shell)",
        "config[1] (launch): needs an X desktop, which an android sandbox has not (use open_app or adb_shell)",
        "config[2] (chrome_open_tabs): needs a browser, which a android sandbox has not",
        "evaluator.result: getter 'clipboard' reads the X desktop, which an android sandbox has not",
    ]
    with pytest.raises(TaskError, match="cannot run here"):
        Task.from_dict(on_android.to_dict())


async def test_setup_steps_and_getters_through_adb(phone: tuple[FakeAdbServer, Phone, LocalRuntime]) -> None:
    server, state, runtime = phone
    t = task(
        [
            {"type": "adb_shell", "parameters": {"command": "svc wifi disable"}},
            {"type": "open_app", "parameters": {"package": "com.example.notes", "activity": ".EditActivity"}},
            {"type": "open_app", "parameters": {"package": "com.android.settings"}},
        ],
        [
            {"type": "adb_shell", "command": "settings get global wifi_on"},
            {"type": "android_package"},
            {"type": "android_activity"},
            {"type": "android_ui_texts"},
            {"type": "android_ui_tree"},
        ],
        [rule("0\n"), rule("com.example.notes"), rule("com.example.notes/com.example.notes.EditActivity"),
         rule("Wi-Fi"), {"type": "rule", "rules": {"include": ["<node", "Off"], "exclude": ["On"]}}],
        func=["exact_match", "exact_match", "exact_match", "is_in_list", "check_include_exclude"],
    )  # fmt: skip
    await run_setup(t, runtime, Fixtures())
    assert not state.wifi
    assert server.commands[:3] == [
        "svc wifi disable",
        "am start -W -n com.example.notes/.EditActivity",
        "monkey -p com.android.settings -c android.intent.category.LAUNCHER 1",
    ]
    state.tree = SHOWN
    result = await evaluate(t, runtime, Fixtures())
    assert result.reward == 1.0, result
    state.wifi = True
    assert (await evaluate(t, runtime, Fixtures())).reward == 0.0


async def test_failing_steps_name_what_failed(phone: tuple[FakeAdbServer, Phone, LocalRuntime]) -> None:
    _, _, runtime = phone
    missing = task([{"type": "open_app", "parameters": {"package": "com.missing.app"}}], None, None, func="infeasible")
    with pytest.raises(TaskError, match=r"config\[0\] \(open_app\): cannot open com\.missing\.app"):
        await run_setup(missing, runtime, Fixtures())
    bad = task([{"type": "open_app", "parameters": {"package": "no spaces"}}], None, None, func="infeasible")
    with pytest.raises(TaskError, match="parameter 'package' must be a valid name"):
        await run_setup(bad, runtime, Fixtures())
    install = task([{"type": "adb_install", "parameters": {"path": "/nope.apk"}}], None, None, func="infeasible")
    with pytest.raises(TaskError, match=r"config\[0\] \(adb_install\): adb install -r -g /nope.apk failed"):
        await run_setup(install, runtime, Fixtures())  # adb itself refuses a file that is not there


def test_the_resumed_activity_pattern() -> None:
    for line, found in [
        ("topResumedActivity=ActivityRecord{c0 u0 com.a.settings/.Settings t12}", ("com.a.settings", ".Settings")),
        ("mResumedActivity: ActivityRecord{1 u0 com.a.b/com.a.b.Main$Inner t1}", ("com.a.b", "com.a.b.Main$Inner")),
    ]:  # fmt: skip
        match = RESUMED.search(line)
        assert match is not None and match.groups() == found
