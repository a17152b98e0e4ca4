"""The SWE-ReX runtime's in-sandbox helper, on this machine: the session daemon's terminal operations (a real bash on
a real pseudo-terminal) and the one-shot commands. The helper is a standalone script (standard library only), loaded
here from its file: the ``sandbox.compat.swerex`` package itself needs swe-rex, which this venv does not have. The
whole runtime is tested against a control plane by test_swerex_side_by_side.py."""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HELPER_DIR = Path(__file__).resolve().parents[2] / "sandbox" / "compat" / "swerex"
PS1 = "TESTPS1MARK"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"swerex_helper_{name}", HELPER_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ptyd = _load("ptyd")
inbox = _load("inbox")


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A daemon whose bashes start as the runtime's do in a sandbox: no TERM (the helper passes its environment on)."""
    monkeypatch.delenv("TERM", raising=False)
    d = ptyd.Daemon()
    yield d
    for session in list(d.sessions.values()):
        session.close()


def run(daemon: Any, *ops: dict[str, Any], **request: Any) -> list[dict[str, Any]]:
    reply = daemon.handle({"session": "s", "ops": list(ops), **request})
    assert "error" not in reply, reply
    return list(reply["results"])


def send(text: str) -> dict[str, Any]:
    return {"op": "send", "data": text + "\n"}


def expect(*patterns: str, timeout: float = 10) -> dict[str, Any]:
    return {"op": "expect", "patterns": list(patterns), "timeout": timeout}


def opened(daemon: Any) -> None:
    env = {"PS1": PS1, "PS2": "", "PS0": "", "HOME": "/nonexistent"}
    # As the runtime starts a session: bash is given 0.3 s to set its terminal up before the first line.
    sleep = {"op": "sleep", "seconds": 0.3}
    results = run(daemon, sleep, send(f"export PS1='{PS1}'"), expect(PS1), open=True, env=env)
    assert results[-1]["ok"], results


def test_a_command_its_output_and_the_prompt(daemon: Any) -> None:
    opened(daemon)
    *_, got = run(daemon, send("echo one; echo two >&2"), expect(PS1))
    assert got["ok"] and got["index"] == 0
    assert got["before"].replace("\r\n", "\n").strip() == "one\ntwo"
    # The earliest match wins, whatever the order of the patterns.
    *_, got = run(daemon, send("echo AAA BBB"), expect("BBB", "AAA"))
    assert got["index"] == 1
    *_, rest = run(daemon, expect(PS1))
    assert rest["before"].strip() == "BBB"


def test_a_timeout_leaves_the_command_running_until_ctrl_c(daemon: Any) -> None:
    opened(daemon)
    *_, got = run(daemon, send("sleep 30; echo finished"), expect(PS1, timeout=0.3))
    assert got == {"ok": False, "timeout": True}
    # Nothing stopped it: the prompt is still not back.
    assert run(daemon, expect(PS1, timeout=0.3)) == [{"ok": False, "timeout": True}]
    _, got = run(daemon, {"op": "control", "char": "c"}, expect(PS1))
    assert got["ok"] and "finished" not in got["before"]
    *_, got = run(daemon, send("echo $?"), expect(PS1))
    assert got["before"].strip() == "130"


def test_operations_stop_at_the_first_that_fails(daemon: Any) -> None:
    opened(daemon)
    results = run(daemon, {"op": "syntax", "command": "echo 'open"}, send("echo never"), expect(PS1))
    assert len(results) == 1 and not results[0]["ok"]
    assert results[0]["syntax"]["exit_code"] != 0 and "unexpected EOF" in results[0]["syntax"]["stderr"]
    assert run(daemon, {"op": "syntax", "command": "for i in 1; do echo $i; done"}) == [{"ok": True}]


def test_the_shell_exiting_is_the_end_of_the_file(daemon: Any) -> None:
    opened(daemon)
    *_, got = run(daemon, send("exit 3"), expect(PS1))
    assert got["ok"] is False and got["eof"] is True


def test_sessions_by_name_and_close(daemon: Any) -> None:
    assert daemon.handle({"session": "missing", "ops": []})["error"] == "no_session"
    opened(daemon)
    daemon.handle({"session": "s", "ops": [], "close": True})
    assert "s" not in daemon.sessions


def one_shot(command: str, request: dict[str, Any]) -> dict[str, Any]:
    return dict(getattr(inbox, command)(request))


def test_execute_runs_a_command_as_subprocess_run_does(tmp_path: Path) -> None:
    base = {"timeout": 10, "env": None, "cwd": None, "merge_output_streams": False}
    assert one_shot("execute", {**base, "command": ["echo", "hi"], "shell": False}) == {
        "stdout": "hi\n",
        "stderr": "",
        "exit_code": 0,
    }
    merged = one_shot("execute", {**base, "command": "echo a; echo b >&2", "shell": True, "merge_output_streams": True})
    assert merged["stdout"] == "a\nb\n" and merged["stderr"] == ""
    env = one_shot("execute", {**base, "command": "echo ${HOME:-none}", "shell": True, "env": {"X": "1"}})
    assert env["stdout"] == "none\n"  # env replaces the environment
    assert one_shot("execute", {**base, "command": ["sleep", "5"], "shell": False, "timeout": 0.2}) == {"timeout": True}
    missing = one_shot("execute", {**base, "command": ["no-such-program-33"], "shell": False})
    assert missing["error"]["type"] == "FileNotFoundError" and missing["error"]["errno"] == 2


def test_copy_and_untar_put_files_in_place_as_shutil_does(tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.write_bytes(bytes(range(256)))
    folder = tmp_path / "folder"
    folder.mkdir()
    assert one_shot("copy", {"staged": str(staged), "target": str(folder), "mode": 0o750, "name": "b.bin"}) == {}
    assert (folder / "b.bin").read_bytes() == bytes(range(256)) and not staged.exists()
    assert (folder / "b.bin").stat().st_mode & 0o777 == 0o750
    archive = tmp_path / "tree.tar"
    with tarfile.open(archive, "w") as tar:
        info = tarfile.TarInfo("pkg/a.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    assert one_shot("untar", {"staged": str(archive), "target": str(tmp_path / "tree")}) == {}
    assert (tmp_path / "tree" / "pkg" / "a.txt").read_text() == "hi"
    archive.write_bytes(b"")
    again = one_shot("untar", {"staged": str(archive), "target": str(tmp_path / "tree")})
    assert again["error"]["type"] == "FileExistsError"
    assert one_shot("read", {"path": str(tmp_path / "none")})["error"]["type"] == "FileNotFoundError"


def test_serve_and_call_over_the_socket(tmp_path: Path) -> None:
    """The daemon as the runtime starts it: ``inbox.py serve`` returns once it listens; ``call`` talks to it."""
    folder = tmp_path / "box"
    folder.mkdir()
    for name in ("inbox.py", "ptyd.py"):
        (folder / name).write_bytes((HELPER_DIR / name).read_bytes())
    helper = [sys.executable, "-S", str(folder / "inbox.py")]
    served = subprocess.run([*helper, "serve", str(folder)], capture_output=True, text=True, timeout=30)
    assert served.returncode == 0, served.stdout + served.stderr
    try:
        request = '{"session": "s", "open": true, "env": {"PS1": "P1M"}, "ops": [{"op": "send", "data": "echo hi\\n"}, '
        request += '{"op": "expect", "patterns": ["hi"], "timeout": 10}]}'
        called = subprocess.run([*helper, "call", str(folder), request], capture_output=True, text=True, timeout=30)
        assert called.returncode == 0, called.stderr
        assert '"ok": true' in called.stdout and '"index": 0' in called.stdout
    finally:
        stop = '{"session": "", "shutdown": true}'
        subprocess.run([*helper, "call", str(folder), stop], capture_output=True, timeout=30, check=True)
    # The daemon removes its socket when it stops.
    for _ in range(200):
        if not os.path.exists(folder / "sock"):
            break
        time.sleep(0.05)
    assert not os.path.exists(folder / "sock")
