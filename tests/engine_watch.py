"""After a Docker test fails, ask whether the engine still answers. A dockerd that stopped answering (the libnetwork
deadlock of docs/hardening.md, or a crash) would make every later test wait out its timeouts, and the run outlast
CI's limit with nothing said: instead the session stops there, names the cause, and asks our dockerd for its
goroutine dump (SIGUSR1 to the process `make setup` started; dockerd logs where it wrote the stacks)."""

from __future__ import annotations

import os
import signal
import subprocess

ANSWER_WITHIN_S = 30
DOCKERD_PIDFILE = "/var/run/sandbox-dockerd.pid"
DOCKERD_LOG = "/var/log/sandbox-dockerd.log"


def engine_answers() -> bool:
    """``docker info`` (the call a deadlocked engine stops answering) within the time, through the CLI: a client
    made in this process would leave its socket behind when the engine is gone."""
    try:
        done = subprocess.run(["docker", "info", "--format", "{{.ID}}"], capture_output=True, timeout=ANSWER_WITHIN_S)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def ask_for_goroutine_dump() -> str:
    """SIGUSR1 to the dockerd of our pidfile, if it runs; what was done, for the stop message."""
    try:
        with open(DOCKERD_PIDFILE) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGUSR1)
    except (OSError, ValueError) as e:
        return f"no goroutine dump ({DOCKERD_PIDFILE}: {e})"
    return f"dockerd {pid} was asked for its goroutine dump: see 'goroutine stacks written to' in {DOCKERD_LOG}"


def stop_reason() -> str | None:
    """Why the session must stop, or None while the engine answers."""
    if engine_answers():
        return None
    return (
        f"the Docker engine stopped answering (no `docker info` within {ANSWER_WITHIN_S} s) after this failure; "
        f"later tests would only wait out their timeouts. {ask_for_goroutine_dump()}"
    )
