"""The test harness's engine watch: an engine that does not answer is named as the reason to stop, and the dockerd
of the pidfile is asked for its goroutine dump."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import engine_watch

TRAPS_USR1 = """
import os, pathlib, signal, sys, time
marker = pathlib.Path(sys.argv[1])
def dump(*_):  # written aside, then renamed: the test never reads a marker created but not yet written
    marker.with_suffix(".part").write_text("dumped")
    os.replace(marker.with_suffix(".part"), marker)
signal.signal(signal.SIGUSR1, dump)
print("ready", flush=True)
time.sleep(30)
"""


def test_an_engine_that_does_not_answer_stops_the_session_and_is_asked_for_its_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    marker = tmp_path / "dumped"
    fake_dockerd = subprocess.Popen([sys.executable, "-c", TRAPS_USR1, str(marker)], stdout=subprocess.PIPE, text=True)
    try:
        assert fake_dockerd.stdout is not None and fake_dockerd.stdout.readline() == "ready\n"
        pidfile = tmp_path / "dockerd.pid"
        pidfile.write_text(f"{fake_dockerd.pid}\n")
        monkeypatch.setattr(engine_watch, "DOCKERD_PIDFILE", str(pidfile))
        reason = engine_watch.stop_reason()
        assert reason is not None and "stopped answering" in reason and f"dockerd {fake_dockerd.pid}" in reason
        give_up = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < give_up:
            time.sleep(0.05)
        assert marker.read_text() == "dumped"
    finally:
        fake_dockerd.kill()
        fake_dockerd.communicate()


def test_without_a_pidfile_the_reason_says_there_is_no_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setattr(engine_watch, "DOCKERD_PIDFILE", str(tmp_path / "missing.pid"))
    reason = engine_watch.stop_reason()
    assert reason is not None and "no goroutine dump" in reason
