"""The teardown lane: which engines need it, one call at a time in a process and across processes, a cancelled
caller leaves the queue, and a lock file that cannot be opened still leaves the process serial."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox.backends.docker.teardown import TeardownLane, engine_needs_lane

Interval = tuple[float, float]


def _disjoint(intervals: list[Interval]) -> bool:
    ordered = sorted(intervals)
    return all(earlier[1] <= later[0] for earlier, later in itertools.pairwise(ordered))


@pytest.mark.parametrize(
    ("version", "needed"),
    [("20.10.24+dfsg1", True), ("20.10.27", True), ("19.03.15", True), ("23.0.0", False), ("28.2.2", False),
     ("", True), ("None", True), ("dev", True)],
)  # fmt: skip
def test_engines_before_23_and_unknown_ones_need_the_lane(version: str, needed: bool) -> None:
    assert engine_needs_lane(version) is needed


async def test_calls_take_turns_and_leave_the_worker_threads_free(tmp_path: Path) -> None:
    lane = TeardownLane(str(tmp_path / "lock"))
    intervals: list[Interval] = []
    release = threading.Event()

    def teardown() -> None:
        release.wait(30)  # the lane stays busy until the engine call below is through
        started = time.monotonic()
        time.sleep(0.01)
        intervals.append((started, time.monotonic()))

    try:
        queued = asyncio.gather(*(lane.run(teardown) for _ in range(8)))
        await asyncio.sleep(0.01)
        try:
            # An engine call beside a queue of removals. Were the queue waiting in the default executor's threads
            # (6 on 2 cores), this call would wait for the teardowns, which wait for it: the timeout says so.
            await asyncio.wait_for(asyncio.to_thread(lambda: None), 20)
        except TimeoutError:
            pytest.fail("the queue of teardowns held the worker threads")
        finally:
            release.set()
        await queued
    finally:
        lane.close()
    assert len(intervals) == 8 and _disjoint(intervals), intervals


WORKER = """
import json, sys, time
from sandbox.backends.docker.teardown import TeardownLane
lane = TeardownLane(sys.argv[1])
spans = []
def teardown():
    started = time.time()
    time.sleep(0.04)
    spans.append((started, time.time()))
for _ in range(5):
    lane.run_sync(teardown)
lane.close()
print(json.dumps(spans))
"""


def test_processes_sharing_a_lock_file_take_turns(tmp_path: Path) -> None:
    lock = str(tmp_path / "teardown.lock")
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, lock], stdout=subprocess.PIPE, text=True) for _ in range(3)
    ]
    spans: list[Interval] = []
    for worker in workers:
        out, _ = worker.communicate(timeout=60)
        assert worker.returncode == 0
        spans += [tuple(span) for span in json.loads(out)]  # type: ignore[misc]
    assert len(spans) == 15 and _disjoint(spans), sorted(spans)


async def test_a_caller_cancelled_before_its_turn_leaves_the_queue(tmp_path: Path) -> None:
    lane = TeardownLane(str(tmp_path / "lock"))
    release = threading.Event()
    ran: list[str] = []
    try:
        first = asyncio.ensure_future(lane.run(lambda: release.wait(10)))
        second = asyncio.ensure_future(lane.run(lambda: ran.append("second")))
        await asyncio.sleep(0.05)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second  # by now its call has left the lane's queue
        release.set()
        assert await first is True
        await lane.run(lambda: ran.append("third"))
    finally:
        lane.close()
    assert ran == ["third"]


async def test_an_unopenable_lock_file_warns_once_and_the_process_stays_serial(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "a-file").write_text("")
    lane = TeardownLane(str(tmp_path / "a-file" / "lock"))
    intervals: list[Interval] = []

    def teardown() -> None:
        started = time.monotonic()
        time.sleep(0.02)
        intervals.append((started, time.monotonic()))

    with caplog.at_level(logging.WARNING, logger="sandbox.backends.docker.teardown"):
        try:
            await asyncio.gather(*(lane.run(teardown) for _ in range(4)))
        finally:
            lane.close()
    assert len(intervals) == 4 and _disjoint(intervals)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "within this process only" in warning
