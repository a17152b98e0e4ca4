"""A test ``redis-server`` does not outlive the process that started it: a test run killed mid-way leaves none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from sandbox.testing.redis_server import RedisServer, ping

OWNER = "import time; from sandbox.testing.redis_server import RedisServer; r = RedisServer(); r.start(); " \
    "print(r.process.pid, r.port, flush=True); time.sleep(600)"  # fmt: skip
"""A process that starts a server and never stops it."""

KEEPER = f"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what the owner leaves is ours to reap, not init's
owner = subprocess.Popen([sys.executable, "-c", {OWNER!r}], stdout=subprocess.PIPE, text=True)
print(owner.stdout.readline().strip(), flush=True)
sys.stdin.readline()
owner.kill()  # no clean-up of its own, as a SIGKILLed pytest
owner.wait()
deadline = time.monotonic() + 10
while time.monotonic() < deadline:  # reap the server and its watchdog as they exit
    try:
        if os.waitpid(-1, os.WNOHANG)[0] == 0:
            time.sleep(0.05)
    except ChildProcessError:
        print("all stopped", flush=True)
        break
else:
    print("still running", flush=True)
"""
"""Starts the owner, kills it when told, and reaps what it left, saying whether everything stopped within 10 s."""


def test_the_server_stops_when_its_owner_is_killed() -> None:
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert keeper.stdin is not None and keeper.stdout is not None
    with keeper:
        pid, port = map(int, keeper.stdout.readline().split())
        try:
            assert ping(port)
            keeper.stdin.write("kill the owner\n")
            keeper.stdin.flush()
            assert keeper.stdout.readline().strip() == "all stopped", "the server outlived its owner"
            assert not ping(port)
        finally:
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGTERM)


def test_a_stopped_server_leaves_no_watchdog() -> None:
    server = RedisServer()
    server.start()
    watchdog = server._watchdog
    assert watchdog is not None and watchdog.poll() is None
    server.close()
    assert watchdog.poll() is not None
    assert server.process is None
