"""The agent's shell, run in-process on this machine (no container): one-shot exec and persistent sessions."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox.agent.errors import AgentError
from sandbox.agent.shell import Shell, _Output, _read_small, _write_small
from sandbox.protocol import ErrorCode


@pytest_asyncio.fixture
async def shell(tmp_path: Path) -> AsyncIterator[Shell]:
    shell = Shell(default_cwd=str(tmp_path), logger=logging.getLogger("test-agent-shell"))
    yield shell
    await shell.close()


async def run(
    shell: Shell, cmd: str | list[str], stdin: bytes = b"", **args: Any
) -> tuple[dict[str, Any], bytes, bytes]:
    """(result, stdout, stderr) of one exec."""
    result, blob = await shell.exec({"cmd": cmd, **args}, stdin)
    split = result["stdout_bytes"]
    assert len(blob) == split + result["stderr_bytes"]
    return result, blob[:split], blob[split:]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in (b"Z", b"X")


def read_pid(path: Path) -> int:
    return int(path.read_text().strip())


# One-shot exec


async def test_timeout_kills_the_whole_process_group(shell: Shell, tmp_path: Path) -> None:
    script = (
        "sleep 300 & echo $! > child.pid; "
        "bash -c 'sleep 301 & echo $! > grandchild.pid; wait' & "
        "echo $$ > shell.pid; sleep 302"
    )
    started = time.monotonic()
    result, _, _ = await run(shell, script, timeout=1)
    elapsed = time.monotonic() - started
    assert result["timed_out"] is True, result
    assert result["exit_code"] == 128 + signal.SIGKILL, result
    # Promptly: the timeout, plus at most the 3 s the agent spends making sure the group is empty (here the
    # killed processes' zombies wait for this machine's init to reap them; in a sandbox, docker's init does it at once).
    assert elapsed < 1 + 3 + 0.5, f"took {elapsed:.2f} s"
    pids = {name: read_pid(tmp_path / f"{name}.pid") for name in ("shell", "child", "grandchild")}
    survivors = {name: pid for name, pid in pids.items() if alive(pid)}
    assert not survivors, f"still running after the timeout: {survivors}"


async def test_background_children_die_with_the_command_unless_kept(shell: Shell) -> None:
    started = time.monotonic()
    result, out, _ = await run(shell, "sleep 303 & echo $!", timeout=20)
    assert not result["timed_out"] and result["exit_code"] == 0, result
    assert time.monotonic() - started < 5, "the background child's pipe held the call"
    assert not alive(int(out)), "the command's background child outlived it"

    result, out, _ = await run(shell, "sleep 304 & echo $!", timeout=20, keep_background=True)
    pid = int(out)
    try:
        assert not result["timed_out"] and result["exit_code"] == 0, result
        assert alive(pid), "keep_background=True must leave the background child running"
    finally:
        os.kill(pid, signal.SIGKILL)


async def test_stdout_and_stderr_arrive_byte_exact(shell: Shell) -> None:
    stdout = bytes(range(256)) * 3 + b"\xff\xfe\x00\r\nno newline at the end"
    stderr = b"\x80\x81 not utf-8 \x00\n"
    code = (
        "import sys; sys.stdout.buffer.write(bytes.fromhex(sys.argv[1])); "
        "sys.stderr.buffer.write(bytes.fromhex(sys.argv[2]))"
    )
    result, out, err = await run(shell, [sys.executable, "-c", code, stdout.hex(), stderr.hex()])
    assert (out, err) == (stdout, stderr)
    assert result["exit_code"] == 0 and not result["stdout_truncated"] and not result["stderr_truncated"]


async def test_megabytes_of_random_output_arrive_intact(shell: Shell) -> None:
    code = (
        "import hashlib, os, sys\n"
        "data = os.urandom(3_000_000)\n"
        "sys.stderr.write(hashlib.sha256(data).hexdigest())\n"
        "sys.stdout.buffer.write(data)\n"
    )
    result, out, err = await run(shell, [sys.executable, "-c", code], timeout=30)
    assert result["exit_code"] == 0, err
    assert len(out) == 3_000_000 and hashlib.sha256(out).hexdigest() == err.decode()


async def test_output_over_the_cap_is_truncated_and_reported(shell: Shell) -> None:
    code = "import sys; sys.stdout.write('o' * 5000); sys.stderr.write('e' * 10)"
    result, out, err = await run(shell, [sys.executable, "-c", code], max_output=1000)
    assert result["stdout_truncated"] is True and result["stdout_bytes"] == 1000 and out == b"o" * 1000
    assert result["stderr_truncated"] is False and err == b"e" * 10
    assert result["exit_code"] == 0

    code = "import sys; sys.stdout.write('o' * 10); sys.stderr.write('e' * 5000)"
    result, out, err = await run(shell, [sys.executable, "-c", code], max_output=1000)
    assert (result["stdout_truncated"], result["stderr_truncated"]) == (False, True)
    assert (out, err) == (b"o" * 10, b"e" * 1000)


async def test_stdin_env_cwd_and_exit_code(shell: Shell, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    result, out, err = await run(
        shell,
        'echo "$A-$(pwd)"; cat; echo err >&2; exit 7',
        stdin=b"in\x00put",
        env={"A": "x"},
        cwd=str(tmp_path / "sub"),
    )
    assert result["exit_code"] == 7
    assert out == f"x-{tmp_path}/sub\n".encode() + b"in\x00put"
    assert err == b"err\n"
    result, out, _ = await run(shell, "pwd")
    assert out.decode().strip() == str(tmp_path), "the default cwd is the workspace"


async def test_bad_exec_requests_are_refused(shell: Shell) -> None:
    for args in ({"cmd": ""}, {"cmd": []}, {"cmd": "true", "timeout": 0}, {"cmd": "true", "env": {"A=B": "x"}}):
        with pytest.raises(AgentError) as caught:
            await shell.exec(args, b"")
        assert caught.value.code == ErrorCode.BAD_REQUEST, args
    with pytest.raises(AgentError) as caught:
        await shell.exec({"cmd": ["/no/such/program"]}, b"")
    assert caught.value.code == ErrorCode.NOT_FOUND


# Sessions


async def test_session_keeps_cwd_and_exports(shell: Shell, tmp_path: Path) -> None:
    (tmp_path / "deep" / "er").mkdir(parents=True)
    first, _, err = await run(shell, "cd deep/er && export GREETING='hi there'", session="s")
    assert first["exit_code"] == 0 and first["session"] == "s", err
    _, out, _ = await run(shell, 'pwd; echo "$GREETING"', session="s")
    assert out.decode().splitlines() == [f"{tmp_path}/deep/er", "hi there"]
    _, out, _ = await run(shell, 'pwd; echo "[$GREETING]"', session="other")
    assert out.decode().splitlines() == [str(tmp_path), "[]"], "sessions must not share state"
    _, out, _ = await run(shell, 'pwd; echo "[$GREETING]"')
    assert out.decode().splitlines() == [str(tmp_path), "[]"], "a one-shot exec must not see a session's state"


async def test_a_session_refuses_env_names_bash_cannot_export_and_stays_usable(shell: Shell) -> None:
    """A quote in a name left the session's bash inside an open string: the command ran into its timeout (found by
    the REST contract test's generated requests)."""
    started = time.monotonic()
    for name in ('a"b', "x'y", "1st", "a b", "a-b", "é"):
        with pytest.raises(AgentError) as caught:
            await shell.exec({"cmd": "true", "session": "s", "env": {name: "v"}, "timeout": 5}, b"")
        assert caught.value.code == ErrorCode.BAD_REQUEST and "shell identifiers" in caught.value.message, name
    assert time.monotonic() - started < 5, "refused up front, not after the command's timeout"
    result, out, _ = await run(shell, 'echo "$_OK1"', session="s", env={"_OK1": 'it\'s "fine"\n'}, timeout=5)
    assert (result["exit_code"], out) == (0, b'it\'s "fine"\n\n')
    result, out, _ = await run(shell, "env", env={'a"b': "v"})  # a one-shot exec passes any name through execve
    assert result["exit_code"] == 0 and b'a"b=v' in out.splitlines()


async def test_session_output_small_or_large_or_capped_comes_back_whole(shell: Shell) -> None:
    """Small files go through the event loop, large ones through a thread: the caller sees the same either way."""
    small, out, err = await run(shell, "echo hi; echo oops >&2", session="s")
    assert (out, err, small["stdout_truncated"]) == (b"hi\n", b"oops\n", False)
    big, out, _ = await run(shell, "head -c 300000 /dev/zero", session="s")
    assert len(out) == 300000 and not big["stdout_truncated"]
    capped, out, _ = await run(shell, "head -c 5000 /dev/zero", session="s", max_output=1000)
    assert len(out) == 1000 and capped["stdout_truncated"]
    command = "echo " + "x" * 100_000  # a command larger than the in-loop write
    long, out, _ = await run(shell, command, session="s")
    assert long["exit_code"] == 0 and out == b"x" * 100_000 + b"\n"


async def test_session_whose_output_file_is_swapped_for_a_fifo_does_not_block_the_agent(
    shell: Shell, tmp_path: Path
) -> None:
    """The sandbox's own processes can replace the session's files; the in-loop read never waits on a FIFO."""
    await run(shell, "true", session="s")
    session_dir = shell._sessions["s"]._dir
    err_path = os.path.join(session_dir, "err")
    os.unlink(err_path)
    os.mkfifo(err_path)
    sink = _Output(1000)
    started = time.monotonic()
    assert _read_small(err_path, sink) is False  # left to the thread path, at once
    # An open of a FIFO with no writer blocks for good: a bound far above any stall of a loaded machine says so.
    assert time.monotonic() - started < 10 and sink.size == 0


async def test_session_survives_a_timeout(shell: Shell, tmp_path: Path) -> None:
    await run(shell, "cd /tmp && export KEEP=1", session="s")
    started = time.monotonic()
    slow, _, _ = await run(shell, f"sh -c 'echo $$ > {tmp_path}/sleeper.pid; exec sleep 100'", session="s", timeout=0.5)
    assert slow["timed_out"] is True, slow
    assert time.monotonic() - started < 3
    assert slow["session_restarted"] is False, "killing the command was enough; the shell must stay"
    assert not alive(read_pid(tmp_path / "sleeper.pid")), "the timed-out command still runs"
    after, out, _ = await run(shell, "pwd; echo $KEEP", session="s")
    assert out.decode().splitlines() == ["/tmp", "1"]
    assert after["timed_out"] is False and after["exit_code"] == 0


async def test_session_survives_a_syntax_error(shell: Shell) -> None:
    await run(shell, "cd /tmp && export KEEP=2", session="s")
    broken, _, err = await run(shell, "echo 'unclosed", session="s")
    assert broken["exit_code"] != 0 and b"unexpected EOF" in err, (broken, err)
    assert broken["session_restarted"] is False
    _, out, _ = await run(shell, "pwd; echo $KEEP", session="s")
    assert out.decode().splitlines() == ["/tmp", "2"]


async def test_session_that_exits_is_restarted_fresh(shell: Shell, tmp_path: Path) -> None:
    await run(shell, "cd /tmp && export KEEP=3", session="s")
    ended, _, _ = await run(shell, "exit 3", session="s")
    assert ended["session_restarted"] is True and ended["exit_code"] is None, ended
    fresh, out, _ = await run(shell, 'pwd; echo "[$KEEP]"', session="s")
    assert out.decode().splitlines() == [str(tmp_path), "[]"]
    assert fresh["session_restarted"] is False and fresh["exit_code"] == 0


async def test_session_output_is_byte_exact_and_capped(shell: Shell) -> None:
    result, out, err = await run(shell, r"printf 'a\000b\377'; printf 'e\001' >&2; false", session="s")
    assert (out, err, result["exit_code"]) == (b"a\x00b\xff", b"e\x01", 1)
    result, out, err = await run(shell, "head -c 5000 /dev/zero; echo tiny >&2", session="s", max_output=100)
    assert result["stdout_truncated"] is True and out == b"\x00" * 100
    assert result["stderr_truncated"] is False and err == b"tiny\n"


async def test_sessions_are_listed_and_closed(shell: Shell) -> None:
    await run(shell, "true", session="a")
    await run(shell, "true", session="b")
    assert (await shell.list_sessions({}, b""))[0] == {"sessions": ["a", "b"]}
    assert (await shell.close_session({"session": "a"}, b""))[0] == {"closed": "a"}
    assert (await shell.list_sessions({}, b""))[0] == {"sessions": ["b"]}
    with pytest.raises(AgentError) as caught:
        await shell.close_session({"session": "a"}, b"")
    assert caught.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(AgentError) as caught:
        await shell.exec({"cmd": ["echo", "argv"], "session": "b"}, b"")
    assert caught.value.code == ErrorCode.BAD_REQUEST


async def test_a_session_command_runs_at_the_top_level_of_its_shell(shell: Shell) -> None:
    """`break` and `continue` outside a loop only complain, as in bash; `declare` and `local` behave as at the top
    level, not inside a function: the session's shell runs each command from a sourced file, not from a loop or a
    function of its own."""
    result, out, err = await run(shell, "echo before; break; continue; echo after", session="s", timeout=10)
    assert (result["exit_code"], out) == (0, b"before\nafter\n"), (result, err)
    assert b"only meaningful" in err
    await run(shell, "declare KEPT=1; local NOT=2", session="s", timeout=10)
    _, out, _ = await run(shell, 'echo "$KEPT[$NOT]"', session="s", timeout=10)
    assert out == b"1[]\n"


async def test_commands_sent_at_once_to_one_session_each_get_their_own_output(shell: Shell) -> None:
    results = await asyncio.gather(*(run(shell, f"X={i}; echo $X", session="s", timeout=30) for i in range(20)))
    assert [out for _, out, _ in results] == [f"{i}\n".encode() for i in range(20)]


def test_a_command_file_is_rewritten_in_place_and_cut_to_its_new_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Never truncated to nothing first: ext4 flushes such a file to disk when it is closed (see _write_small)."""
    path = tmp_path / "cmd.sh"
    assert _write_small(str(path), "echo a long command\n")
    flags: list[int] = []
    real_open = os.open

    def spy(file: str, flag: int, mode: int = 0o777) -> int:
        flags.append(flag)
        return real_open(file, flag, mode)

    monkeypatch.setattr(os, "open", spy)
    assert _write_small(str(path), "true\n")
    assert path.read_text() == "true\n"
    assert flags and not any(flag & os.O_TRUNC for flag in flags)
