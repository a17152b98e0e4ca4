"""Setup steps against a recording fake runtime: OSWorld's commands, placeholders, paths, and failures named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox.errors import NotFound, PermissionDenied, Unavailable
from sandbox.models import ExecResult, SandboxKind
from sandbox.tasks import Fixtures, Task, TaskError, osworld, run_setup, scripts, setup_steps

Handler = Callable[[str | list[str]], ExecResult | None]


def ok(stdout: str = "", stderr: str = "", code: int = 0) -> ExecResult:
    return ExecResult(exit_code=code, stdout=stdout, stderr=stderr)


class FakeRuntime:
    """Records every call; files in a dict; exec answered by ``handler`` (None: exit 0, no output). Paths outside
    /workspace and /tmp are refused by the file calls, as the agent's file API does."""

    def __init__(self, kind: SandboxKind = SandboxKind.DESKTOP, handler: Handler | None = None) -> None:
        self.kind = kind
        self.screen_width, self.screen_height = 1920, 1080
        self.handler = handler
        self.files: dict[str, bytes] = {}
        self.execs: list[dict[str, Any]] = []
        self.calls: list[tuple[str, Any]] = []
        self.url = "about:blank"
        self.tabs: list[dict[str, Any]] = []
        self.js: dict[str, Any] = {}

    def _check(self, path: str) -> None:
        if not path.startswith(("/workspace/", "/tmp/")):
            raise PermissionDenied(f"{path} is outside the roots")

    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float = 60,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        self.execs.append({"cmd": cmd, "timeout": timeout, "keep_background": keep_background})
        answer = self.handler(cmd) if self.handler else None
        return answer if answer is not None else ok()

    async def read_file(self, path: str) -> bytes:
        self._check(path)
        if path not in self.files:
            raise NotFound(path)
        return self.files[path]

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int:
        self._check(path)
        self.files[path] = data
        return len(data)

    async def browser_info(self) -> dict[str, Any]:
        return {"url": self.url, "title": "T"}

    async def browser_tabs(self) -> list[dict[str, Any]]:
        return self.tabs

    async def navigate(self, url: str) -> dict[str, Any]:
        self.calls.append(("navigate", url))
        self.url = url
        return {"url": url, "title": "T"}

    async def evaluate_js(self, expression: str) -> Any:
        self.calls.append(("evaluate", expression))
        return self.js.get(expression, self.url)


def task_with(*steps: dict[str, Any], kind: str = "desktop") -> Task:
    return Task.from_dict(
        {
            "id": "t",
            "instruction": "-",
            "sandbox": {"kind": kind},
            "config": list(steps),
            "evaluator": {"func": "infeasible"},
        }
    )


def step(type_: str, **parameters: Any) -> dict[str, Any]:
    return {"type": type_, "parameters": parameters}


async def test_execute_substitutes_placeholders_in_strings_and_list_items() -> None:
    rt = FakeRuntime()
    task = task_with(
        step("execute", command=["xdotool", "mousemove", "{SCREEN_WIDTH_HALF}", "{SCREEN_HEIGHT_HALF}"]),
        step("command", command="echo {CLIENT_PASSWORD} {SCREEN_WIDTH}x{SCREEN_HEIGHT} > /tmp/s", shell=True),
        step("execute", command="printf '%s' {SCREEN_WIDTH}"),
    )
    await run_setup(task, rt, Fixtures(), password="hunter2")
    assert [e["cmd"] for e in rt.execs] == [
        ["xdotool", "mousemove", "960", "540"],
        "echo hunter2 1920x1080 > /tmp/s",
        ["printf", "%s", "1920"],  # shell false: split like shlex, as OSWorld's server does
    ]


async def test_commands_map_osworld_home_chrome_and_python() -> None:
    rt = FakeRuntime()
    task = task_with(
        step("execute", command=["python", "-c", "print(1)", "/home/user/a", "~/b"]),
        step("execute", command="cp /home/user/x /home/username/y ~/.config/google-chrome/Default/z", shell=True),
        step("execute", command=["echo $0-$1", "one", "two"], shell=True),
        step("launch", command=["google-chrome", "--remote-debugging-port=1337", "https://x.test"]),
        step("launch", command="/usr/bin/google-chrome-stable --incognito", shell=True),
    )
    await run_setup(task, rt, Fixtures())
    cmds = [e["cmd"] for e in rt.execs if e["cmd"] != setup_steps.WM_READY]  # launch first waits for the window manager
    assert cmds[0] == ["python3", "-c", "print(1)", "/home/sandbox/a", "/home/sandbox/b"]
    assert cmds[1] == "cp /home/sandbox/x /home/username/y ~/.config/chromium/Default/z"
    assert cmds[2] == ["bash", "-c", "echo $0-$1", "one", "two"]  # a list with shell: the script, then $0 $1 ...
    assert "chromium --remote-debugging-port=1337 https://x.test" in cmds[3] and "setsid" in cmds[3]
    assert "chromium --incognito" in cmds[4]
    assert all(e["keep_background"] for e in rt.execs[3:] if e["cmd"] != setup_steps.WM_READY)
    assert [e["cmd"] for e in rt.execs].count(setup_steps.WM_READY) == 2


async def test_execute_keeps_outputs_for_cache_file_and_retries_until() -> None:
    answers = iter([ok("not yet"), ok("still not"), ok("ready now", "warn")])
    rt = FakeRuntime(handler=lambda cmd: next(answers))
    task = task_with(step("execute", command="probe", stdout="out.txt", stderr="err.txt", until={"stdout": "ready"}))
    await run_setup(task, rt, Fixtures())
    assert len(rt.execs) == 3
    assert rt.files[f"{osworld.CACHE_DIR}/out.txt"] == b"ready now"
    assert rt.files[f"{osworld.CACHE_DIR}/err.txt"] == b"warn"


async def test_execute_ignores_the_exit_code_like_osworld_but_not_a_timeout() -> None:
    rt = FakeRuntime(handler=lambda cmd: ok(code=3))
    await run_setup(task_with(step("execute", command="false")), rt, Fixtures())
    rt = FakeRuntime(handler=lambda cmd: ExecResult(exit_code=None, stdout="", stderr="", timed_out=True))
    with pytest.raises(TaskError, match=r"setup failed at config\[0\] \(execute\): the command did not finish"):
        await run_setup(task_with(step("execute", command="sleep 999")), rt, Fixtures())


async def test_download_writes_fixtures_to_mapped_paths_staging_outside_the_roots(tmp_path: Path) -> None:
    (tmp_path / "fixtures" / "x.test").mkdir(parents=True)
    (tmp_path / "fixtures" / "x.test" / "a.txt").write_bytes(b"AAA")
    rt = FakeRuntime()
    files = [
        {"url": "https://x.test/a.txt", "path": "/workspace/a.txt"},
        {"url": "https://x.test/a.txt", "path": "/home/user/Desktop/a.txt"},
    ]
    await run_setup(task_with(step("download", files=files)), rt, Fixtures.load(tmp_path))
    assert rt.files["/workspace/a.txt"] == b"AAA"
    staged = [p for p in rt.files if p.startswith("/tmp/.sandbox-tasks/stage/")]
    assert len(staged) == 1 and rt.files[staged[0]] == b"AAA"
    assert (
        rt.execs[-1]["cmd"] == f"mkdir -p -- /home/sandbox/Desktop && mv -f -- {staged[0]} /home/sandbox/Desktop/a.txt"
    )


async def test_a_missing_fixture_fails_the_step_naming_the_url_and_the_step() -> None:
    task = task_with(
        step("sleep", seconds=0),
        step("download", files=[{"url": "https://nowhere.test/f.bin", "path": "/workspace/f.bin"}]),
    )
    with pytest.raises(TaskError, match=r"config\[1\] \(download\): no fixture for the URL https://nowhere.test/f.bin"):
        await run_setup(task, FakeRuntime(), Fixtures())


async def test_sandbox_errors_keep_their_class_with_the_step_named() -> None:
    def dead(cmd: str | list[str]) -> ExecResult:
        raise Unavailable("the agent does not answer")

    with pytest.raises(Unavailable, match=r"setup failed at config\[0\] \(execute\): the agent does not answer"):
        await run_setup(task_with(step("execute", command="true")), FakeRuntime(handler=dead), Fixtures())


async def test_windows_are_found_by_title_or_class_and_activated() -> None:
    def windows(cmd: str | list[str]) -> ExecResult | None:
        if isinstance(cmd, list) and cmd[:2] == ["python3", "-c"]:
            return ok(json.dumps([[int(cmd[-1]), "delete"]]))
        return ok("4194311\n4194400\n") if isinstance(cmd, list) and "xdotool" in cmd else None

    rt = FakeRuntime(handler=windows)
    task = task_with(
        step("activate_window", window_name="notes.txt - Mousepad"),
        step("activate_window", window_name="Mousepad", strict=True, by_class=True),
        step("close_window", window_name="a (b)"),
    )
    await run_setup(task, rt, Fixtures())
    searches = [e["cmd"] for e in rt.execs if isinstance(e["cmd"], list) and "xdotool" in e["cmd"]]
    assert searches[0][-2:] == ["--name", r"notes\.txt - Mousepad"]
    assert searches[1][-3:] == ["--class", "--classname", "^Mousepad$"]
    assert searches[2][-2:] == ["--name", r"a \(b\)"]
    assert "xdotool windowactivate --sync 4194311" in rt.execs[1]["cmd"]
    assert rt.execs[-1]["cmd"][:2] == ["python3", "-c"] and rt.execs[-1]["cmd"][-1] == "4194311"


async def test_a_window_that_never_appears_fails_the_step() -> None:
    rt = FakeRuntime(handler=lambda cmd: ok(code=124) if isinstance(cmd, list) and "xdotool" in cmd else None)
    with pytest.raises(TaskError, match=r"config\[0\] \(activate_window\): no window with the title 'Gimp'"):
        await run_setup(task_with(step("activate_window", window_name="Gimp")), rt, Fixtures())


async def test_open_uses_the_default_application_and_waits_for_the_window() -> None:
    def answer(cmd: str | list[str]) -> ExecResult | None:
        if isinstance(cmd, list) and cmd[:2] == ["python3", "-c"]:
            return ok(json.dumps({"mime": "text/plain", "entry": "mousepad.desktop", "argv": ["mousepad", cmd[-1]]}))
        return ok("77\n")

    rt = FakeRuntime(handler=answer)
    await run_setup(task_with(step("open", path="/home/user/Desktop/notes.txt")), rt, Fixtures())
    assert rt.execs[0]["cmd"] == setup_steps.WM_READY
    assert rt.execs[1]["cmd"][-1] == "/home/sandbox/Desktop/notes.txt" and rt.execs[1]["keep_background"]
    assert rt.execs[2]["cmd"][-1] == r"notes\.txt|notes"
    rt = FakeRuntime(handler=lambda cmd: ok(stderr="no such file or folder: /x", code=1))
    with pytest.raises(TaskError, match=r"config\[0\] \(open\): cannot open /x: no such file or folder: /x"):
        await run_setup(task_with(step("open", path="/x")), rt, Fixtures())


async def test_chrome_tabs_open_in_order_and_close_by_url() -> None:
    tabs = [{"id": "A", "url": "about:blank", "title": ""}]

    def cdp(cmd: str | list[str]) -> ExecResult | None:
        assert isinstance(cmd, list) and cmd[:3] == ["python3", "-c", scripts.CDP]
        op, args = cmd[3], cmd[4:]
        if op == "ready":
            return ok("9222")
        if op == "loaded":
            return ok(json.dumps(next(t["url"] for t in tabs if t["id"] == args[0])))
        if op == "list":
            return ok(json.dumps(tabs))
        if op == "new":
            tabs[:0] = [{"id": f"id-{u}", "url": u, "title": ""} for u in reversed(args)]
            return ok(json.dumps([f"id-{u}" for u in args]))  # in the order asked, as the script answers
        for i in args:
            tabs.remove(next(t for t in tabs if t["id"] == i))
        return ok(json.dumps(["Target is closing"] * len(args)))

    rt = FakeRuntime(kind=SandboxKind.BROWSER, handler=cdp)
    rt.url = "https://a.test/"
    task = task_with(
        step("chrome_open_tabs", urls_to_open=["https://a.test/", "https://www.b.test/", "https://c.test/x"]),
        step("chrome_close_tabs", urls_to_close=["https://b.test", "https://nowhere.test/"]),
        kind="browser",
    )
    await run_setup(task, rt, Fixtures())
    assert [t["url"] for t in tabs] == ["https://c.test/x", "https://a.test/"]  # blank start tab and b closed
    ops = [(e["cmd"][3], e["cmd"][4:]) for e in rt.execs]
    assert ops[:5] == [
        ("ready", ["30"]),
        ("list", []),
        ("new", ["https://a.test/", "https://www.b.test/", "https://c.test/x"]),
        ("loaded", ["id-https://c.test/x", "30"]),  # the last tab opened, asked in the sandbox
        ("close", ["A"]),
    ]
    assert ops[5] == ("ready", ["30"])  # chrome_close_tabs: a Chromium just launched may not answer yet
    assert not [c for c in rt.calls if c[0] == "evaluate"]  # a desktop's agent has no browser to evaluate in


async def test_bad_parameters_fail_the_step() -> None:
    for bad, match in [
        (step("sleep", seconds=-1), "seconds must be in"),
        (step("sleep", seconds="1"), "parameter 'seconds' must be"),
        (step("download", files=[{"url": "u"}]), "each file is"),
        (step("execute", command=""), "the command is empty"),
        (step("execute", command="echo 'unclosed"), "cannot split the command"),
        (step("execute", command="x", stdout="../x"), "stdout/stderr must name a relative file"),
        (step("chrome_open_tabs", urls_to_open=[]), "urls_to_open must be a list of URLs"),
    ]:
        with pytest.raises(TaskError, match=match):
            await run_setup(task_with(bad, kind="browser"), FakeRuntime(), Fixtures())


def test_text_mapping_leaves_lookalikes_alone() -> None:
    assert osworld.map_text("ls /home/user /home/user/ /home/users /x/home/user") == (
        "ls /home/sandbox /home/sandbox/ /home/users /x/home/user"
    )
    assert osworld.map_path("~") == "/home/sandbox" and osworld.map_path("~/a") == "/home/sandbox/a"
    assert osworld.map_text("google-chrome-beta google-chrome") == "google-chrome-beta chromium"
