"""One container teardown at a time on an engine whose libnetwork can deadlock on two at once.

Docker before 23 (Debian 12's 20.10.24 among them) has a lock-order deadlock (moby/moby#46661, fixed by
moby/libnetwork#2679): a container leaving its network takes the network's lock and then the controller's, while
the watch loop handling another container's endpoint deletion takes them the other way round. Every container
with network ``none`` is on the same network, so two teardowns that overlap can stop the whole engine; only a
dockerd restart brings it back. Every kill of a container, and every wait for a container's exit, therefore goes
through one lane per host: one worker thread in this process, and an ``flock`` on a host-wide file, so that the
control planes sharing an engine (replicas, a test harness) take turns too. A turn ends only once the engine has
handled the exit (``stop_now``); removing the stopped container's files needs no turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import docker.errors
from docker.models.containers import Container

from sandbox.backends.docker.config import DEFAULT_TEARDOWN_LOCK

T = TypeVar("T")

FIXED_IN_MAJOR = 23  # Docker 23.0 ships libnetwork with the fix

LOGGER = logging.getLogger(__name__)


def engine_needs_lane(server_version: str) -> bool:
    """Whether an engine of this version (``docker info``'s ServerVersion, e.g. ``20.10.24+dfsg1``) has the
    deadlock. A version that does not parse is taken as affected: a lane is slower, a deadlock is fatal."""
    major = server_version.split(".", 1)[0]
    return not major.isdigit() or int(major) < FIXED_IN_MAJOR


def stop_now(container: Container) -> None:
    """Kill the container if it runs, and return once the engine has handled its exit, network teardown included.
    ``wait`` returns as soon as the state reads stopped, which an engine may set before that teardown ends; an
    inspect takes the container's lock, which the engine's exit handling holds to its end."""
    try:
        container.kill()
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: not running
            raise
    container.wait(condition="not-running", timeout=30)
    container.reload()


def run_to_exit(container: Container, *, timeout: float) -> dict[str, Any]:
    """Start a helper container and return its wait result once the engine has handled its exit (as above)."""
    container.start()
    result = dict(container.wait(timeout=timeout))
    container.reload()
    return result


class TeardownLane:
    """Runs blocking teardown calls one at a time, host-wide, in a thread of its own (a queue of removals never
    holds the threads that every other engine call runs in)."""

    def __init__(self, lock_path: str | None = DEFAULT_TEARDOWN_LOCK) -> None:
        self._lock_path = lock_path
        self._executor: ThreadPoolExecutor | None = None
        self._executor_guard = threading.Lock()
        self._warned = False

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the lane. As with ``asyncio.to_thread``, a caller cancelled before its turn leaves the
        queue; one cancelled during its turn lets the call run to its end."""
        return await asyncio.get_running_loop().run_in_executor(self._lane(), self._in_turn, fn)

    def run_sync(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the lane, from a thread that may block (a test harness's clean-up)."""
        return self._lane().submit(self._in_turn, fn).result()

    def close(self) -> None:
        with self._executor_guard:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def _lane(self) -> ThreadPoolExecutor:
        with self._executor_guard:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docker-teardown")
            return self._executor

    def _in_turn(self, fn: Callable[[], T]) -> T:
        with self._host_turn():
            return fn()

    @contextlib.contextmanager
    def _host_turn(self) -> Iterator[None]:
        fd = self._open_lock()
        if fd is None:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _open_lock(self) -> int | None:
        if self._lock_path is None:
            return None
        try:
            os.makedirs(os.path.dirname(self._lock_path) or ".", exist_ok=True)  # /run/lock is missing in some images
            return os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as e:
            if not self._warned:
                self._warned = True
                LOGGER.warning(
                    "teardown lock %s cannot be opened (%s): teardowns take turns within this process only",
                    self._lock_path,
                    e,
                )
            return None
