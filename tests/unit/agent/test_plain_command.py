"""A one-shot command that bash would only split into words runs without bash; everything else, and anything that
cannot be started directly, still runs through bash with bash's exit status and messages."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from sandbox.agent.plain_command import direct_argv
from sandbox.agent.shell import Shell


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("true", ["true"]),
        ("  ls -la /workspace  ", ["ls", "-la", "/workspace"]),
        ("python3 run.py --seed=3 --name a,b@c:d%e+f", ["python3", "run.py", "--seed=3", "--name", "a,b@c:d%e+f"]),
        ("dd if=/dev/zero of=out bs=1k count=1", ["dd", "if=/dev/zero", "of=out", "bs=1k", "count=1"]),
    ],
)
def test_plain_words_run_directly(command: str, argv: list[str]) -> None:
    assert direct_argv(command) == argv


@pytest.mark.parametrize(
    "command",
    [
        "echo $HOME", "ls *.txt", "ls ~", "echo {a,b}", "echo 'quoted'", 'echo "quoted"', "a | b", "a; b", "a && b",
        "a > out", "a < in", "sleep 1 &", "echo `id`", "echo $(id)", "A=1 env", "cd /tmp", "export A=1", "time ls",
        "exit 3", "source x", "echo hi", "kill %1", "ls\tx", "ls\nx", "ls # comment", "ls a\\ b", "(ls)", "! ls",
        "if", "[ -f x ]", "",
    ],
)  # fmt: skip
def test_anything_bash_would_act_on_goes_through_bash(command: str) -> None:
    assert direct_argv(command) is None


@pytest_asyncio.fixture
async def shell(tmp_path: Path) -> AsyncIterator[Shell]:
    shell = Shell(default_cwd=str(tmp_path), logger=logging.getLogger("test-agent-plain-command"))
    yield shell
    await shell.close()


async def _run(shell: Shell, cmd: str, **args: object) -> tuple[int, str, str]:
    result, blob = await shell.exec({"cmd": cmd, **args}, b"")
    split = result["stdout_bytes"]
    return result["exit_code"], blob[:split].decode(), blob[split:].decode()


async def test_a_plain_command_runs_without_bash_and_keeps_env_and_cwd(shell: Shell, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    code, out, _ = await _run(shell, "env", env={"STEP_VAR": "x"}, cwd=str(tmp_path / "sub"))
    lines = out.splitlines()
    assert code == 0 and "STEP_VAR=x" in lines
    assert f"_={shutil.which('env')}" not in lines, "bash sets $_ to the program it runs"
    code, out, _ = await _run(shell, "env true")
    assert code == 0
    code, out, _ = await _run(shell, "pwd", cwd=str(tmp_path / "sub"))  # a builtin: bash runs it
    assert out.strip() == str(tmp_path / "sub")
    code, out, _ = await _run(shell, "env A=1 sh -c 'echo $A'")  # quotes: through bash, which sets $_
    assert (code, out) == (0, "1\n")


async def test_what_cannot_start_directly_gets_bashs_answer(shell: Shell, tmp_path: Path) -> None:
    code, _, err = await _run(shell, "no-such-program --flag")
    assert code == 127 and "command not found" in err
    script = tmp_path / "script-without-shebang"
    script.write_text("echo from-the-script\nexit 4\n")
    os.chmod(script, 0o755)
    code, out, _ = await _run(shell, "./script-without-shebang")
    assert (code, out) == (4, "from-the-script\n"), "bash runs an executable text file without #! as a script"
    (tmp_path / "not-executable").write_text("echo no\n")
    code, _, err = await _run(shell, "./not-executable")
    assert code == 126 and "Permission denied" in err
