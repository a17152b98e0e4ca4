"""Running programs as OSWorld's server does: ``/execute`` (and ``/setup/execute``), ``/run_python``,
``/run_bash_script``, ``/setup/launch`` and ``/setup/execute_with_verification``.

A command is an argv list, or a string: with ``shell: false`` split as ``shlex`` splits it, with ``shell: true`` run
by ``/bin/sh -c`` (a list's first item is then the script and the rest its ``$0 $1 ...``, as ``subprocess`` does).
Arguments that start with ``~/`` are expanded to the home folder. Programs run in the server's working directory
(the home folder), with its environment (the display, the session bus) and stdin from /dev/null; a command that
outlives its time limit is killed with its whole process group.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from sandbox.agent.osworld_api.web import HttpError, Request, Response, json_response, text_response
from sandbox.agent.osworld_api.windows import window_titles

EXECUTE_TIMEOUT_S = 120
RUN_PYTHON_TIMEOUT_S = 30
BASH_SCRIPT_TIMEOUT_S = 100


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


def command_of(data: dict[str, Any]) -> tuple[list[str] | str, bool]:
    """The command of a request's JSON, as OSWorld's server prepares it; 400 when there is none."""
    command = data.get("command")
    shell = bool(data.get("shell", False))
    if not command or not isinstance(command, str | list):
        raise HttpError(400, {"status": "error", "message": "command not supplied"})
    if isinstance(command, str) and not shell:
        command = shlex.split(command)
    if isinstance(command, list):
        command = [os.path.expanduser(a) if isinstance(a, str) and a.startswith("~/") else str(a) for a in command]
    return command, shell


def run(
    command: list[str] | str, *, shell: bool, timeout: float, cwd: str | None = None, merge_stderr: bool = False
) -> Finished:
    """Run to completion; ``subprocess.TimeoutExpired`` (its process group killed) past ``timeout``."""
    proc = subprocess.Popen(
        command,
        shell=shell,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise
    return Finished(proc.returncode, _text(out), _text(err))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()
    proc.communicate()


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


def execute(request: Request) -> Response:
    """``{command, shell}`` -> ``{status, output, error, returncode}``; a command that cannot run: 500."""
    command, shell = command_of(request.json())
    try:
        done = run(command, shell=shell, timeout=EXECUTE_TIMEOUT_S)
    except Exception as e:  # OSWorld's server answers any failure to run (not found, timeout) so
        return json_response({"status": "error", "message": str(e)}, 500)
    return json_response(
        {"status": "success", "output": done.stdout, "error": done.stderr, "returncode": done.returncode}
    )


def launch(request: Request) -> Response:
    """``{command, shell}``: started in the background (its own session), not waited for."""
    command, shell = command_of(request.json())
    try:
        subprocess.Popen(command, shell=shell, stdin=subprocess.DEVNULL, start_new_session=True)
    except Exception as e:
        return text_response(str(e), 500)
    shown = command if isinstance(command, str) else " ".join(command)
    return text_response(f"{shown} launched successfully")


def run_python(request: Request) -> Response:
    """``{code}``: the code run as a script by python3 (30 s) -> ``{status, message, output, error, returncode}``."""
    code = request.json().get("code")
    if not isinstance(code, str) or not code:
        raise HttpError(400, {"status": "error", "message": "Code not supplied!", "output": "", "error": "no code"})
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="osworld-", delete=False) as f:
        f.write(code)
    try:
        done = run(["python3", f.name], shell=False, timeout=RUN_PYTHON_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        why = f"Execution timed out after {RUN_PYTHON_TIMEOUT_S} seconds"
        return json_response({"status": "error", "message": why, "output": "", "error": why}, 500)
    finally:
        os.unlink(f.name)
    ok = done.returncode == 0
    return json_response(
        {
            "status": "success" if ok else "error",
            "message": "Code executed successfully" if ok else "Code execution failed",
            "output": done.stdout,
            "error": done.stderr,
            "returncode": done.returncode,
        }
    )


def run_bash_script(request: Request) -> Response:
    """``{script, timeout, working_dir}`` -> ``{status, output, error, returncode}`` (bash, stderr in ``error``)."""
    data = request.json()
    script = data.get("script")
    timeout = float(data.get("timeout") or BASH_SCRIPT_TIMEOUT_S)
    cwd = data.get("working_dir") or None
    if not isinstance(script, str) or not script:
        raise HttpError(400, {"status": "error", "output": "", "error": "Script not supplied!", "returncode": -1})
    if cwd is not None:
        cwd = os.path.expanduser(str(cwd))
        if not os.path.isdir(cwd):
            why = f"Working directory not found: {cwd}"
            raise HttpError(400, {"status": "error", "output": "", "error": why, "returncode": -1})
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="osworld-", delete=False) as f:
        f.write(script)
    try:
        done = run(["/bin/bash", f.name], shell=False, timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired:
        why = f"Script execution timed out after {timeout:g} seconds"
        return json_response({"status": "error", "output": "", "error": why, "returncode": -1}, 500)
    finally:
        os.unlink(f.name)
    status = "success" if done.returncode == 0 else "error"
    return json_response({"status": status, "output": done.stdout, "error": done.stderr, "returncode": done.returncode})


def execute_with_verification(request: Request) -> Response:
    """``{command, shell, verification: {window_exists, command_success}, max_wait_time, check_interval}``: the
    command run, then the checks polled until they pass (200) or ``max_wait_time`` ends (500)."""
    data = request.json()
    command, shell = command_of(data)
    checks = data.get("verification") or {}
    wait = float(data.get("max_wait_time") or 10)
    interval = max(0.05, float(data.get("check_interval") or 1.0))
    try:
        done = run(command, shell=shell, timeout=EXECUTE_TIMEOUT_S)
    except Exception as e:
        return json_response({"status": "error", "message": str(e)}, 500)
    result = {"output": done.stdout, "error": done.stderr, "returncode": done.returncode}
    started = time.monotonic()
    while True:
        failed = _failed_check(checks)
        if failed is None:
            waited = round(time.monotonic() - started, 3)
            return json_response({"status": "success", **result, "verification": "passed", "wait_time": waited})
        if time.monotonic() - started >= wait:
            why = f"Verification failed after {wait:g} seconds: {failed}"
            return json_response({"status": "verification_failed", **result, "message": why}, 500)
        time.sleep(interval)


def _failed_check(checks: dict[str, Any]) -> str | None:
    window = checks.get("window_exists")
    if window and not any(str(window).lower() in title.lower() for title in window_titles()):
        return f"no window named {window!r}"
    check = checks.get("command_success")
    if check:
        try:
            ok = run(check, shell=isinstance(check, str), timeout=EXECUTE_TIMEOUT_S).returncode == 0
        except Exception:
            ok = False
        if not ok:
            return f"command {check!r} did not succeed"
    return None
