"""Terminal sandboxes on the real engine: exec timeouts, sessions, large output."""

from __future__ import annotations

import hashlib
import time

import pytest

from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker


async def test_exec_timeout_returns_promptly_and_says_so(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    started = time.monotonic()
    result = await sb.agent.exec("sleep 100", timeout=2)
    elapsed = time.monotonic() - started
    assert result.timed_out, result
    assert elapsed < 3, f"took {elapsed:.2f} s"
    # Nothing of the command survives its timeout.
    ps = await sb.agent.exec(["ps", "-eo", "args"])
    assert "sleep 100" not in ps.stdout


async def test_background_child_holding_the_output_does_not_hold_the_call(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    # The background sleep inherits stdout; the call must end when the shell does, not at the timeout.
    kept = await sb.agent.exec("sleep 300 & echo started", keep_background=True, timeout=20)
    assert not kept.timed_out and kept.exit_code == 0 and kept.stdout == "started\n", kept
    assert "sleep 300" in (await sb.agent.exec(["ps", "-eo", "args"])).stdout, "keep_background keeps it running"
    dropped = await sb.agent.exec("sleep 301 & echo started", timeout=20)
    assert not dropped.timed_out and dropped.stdout == "started\n", dropped
    assert "sleep 301" not in (await sb.agent.exec(["ps", "-eo", "args"])).stdout, "without it, the group dies"


async def test_session_keeps_cwd_and_exports(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    first = await sb.agent.exec("mkdir -p /tmp/deep/er && cd /tmp/deep/er && export GREETING='hi there'", session="s")
    assert first.exit_code == 0, first
    again = await sb.agent.exec('pwd; echo "$GREETING"', session="s")
    assert again.stdout.splitlines() == ["/tmp/deep/er", "hi there"]
    other = await sb.agent.exec('pwd; echo "[$GREETING]"', session="other")
    assert other.stdout.splitlines() == ["/workspace", "[]"], "sessions must not share state"
    oneshot = await sb.agent.exec("pwd")
    assert oneshot.stdout.strip() == "/workspace"


async def test_session_survives_timeout_and_syntax_error(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    await sb.agent.exec("cd /tmp && export KEEP=1", session="s")
    slow = await sb.agent.exec("sleep 100", session="s", timeout=1)
    assert slow.timed_out
    broken = await sb.agent.exec("echo 'unclosed", session="s")
    assert broken.exit_code != 0 and "unexpected EOF" in broken.stderr
    after = await sb.agent.exec("pwd; echo $KEEP", session="s")
    assert after.stdout.splitlines() == ["/tmp", "1"]


async def test_ten_megabytes_of_output_arrive_intact(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    script = (
        "import hashlib, os, sys\n"
        "data = (os.urandom(5_000_000).hex())[:10_000_000]\n"
        "sys.stderr.write(hashlib.sha256(data.encode()).hexdigest())\n"
        "sys.stdout.write(data)\n"
    )
    started = time.monotonic()
    result = await sb.agent.exec(["python3", "-c", script], timeout=60)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout) == 10_000_000
    assert hashlib.sha256(result.stdout.encode()).hexdigest() == result.stderr
    assert not result.stdout_truncated
    assert time.monotonic() - started < 30


async def test_output_cap_truncates_and_says_so(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    result = await sb.agent.exec("yes | head -c 5000000", max_output=1000)
    assert result.stdout_truncated and len(result.stdout) == 1000 and result.exit_code == 0


async def test_exec_env_cwd_and_exit_code(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    result = await sb.agent.exec('echo "$A-$(pwd)" ; echo err >&2; exit 7', env={"A": "x"}, cwd="/tmp")
    assert (result.exit_code, result.stdout, result.stderr) == (7, "x-/tmp\n", "err\n")
    assert (await sb.agent.exec("id -u")).stdout.strip() != "0", "the sandbox user must not be root"
