"""The owner's pods as the API server last told them: ONE informer (list once, then watch; informer.py) that the
backend's listings read instead of asking the API server for every pod again.

Every health round (each ``health_interval_s``, 2 s) lists the instances that are not running, and reconciliation
lists them all and reads their snapshot annotations: as LISTs of every pod, that was tens of MB of JSON to build,
send and decode each round at 5,000 pods (docs/kubernetes.md, "At scale"). From the cache the same answer costs a
walk over the dicts in memory; the API server sends only what changes.

The informer starts with the first read (the leader's first health round; any replica that lists, e.g. to count
what the others run), and runs until the backend closes. A read waits for its first listing; while the informer
does not follow the server (its watch failed and it has not listed again yet), a read asks the server itself, with
a paginated LIST, so a listing is never older than a failure. Like every informer's, the cache is behind the server
by the time an event takes to arrive (milliseconds), except for this process's own writes: a read waits until the
cache has seen the last pod write this process made (its resourceVersion, ``KubeApi.written``). A pod another
replica created this instant may be missing from it, which the callers allow for (a health round judges running
pods by their agents; reconciliation acts on what two passes in a row agree on).

``subscribe`` hands every change to a callback as well: the operator can mirror pods from this informer instead of
keeping a second watch of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.backends.kubernetes.informer import LIST_PAGE, Change, Informer, stripped
from sandbox.errors import Unavailable

WRITE_SEEN_S = 2.0
"""How long a read waits for the event of this process's own last write of a pod before it LISTs instead."""
WATCH_TIMEOUT_S = 300.0
"""How long one watch request lasts before the informer opens the next (the API server's own cap is 30 min)."""


class PodCache:
    def __init__(
        self,
        connect: Callable[[], Awaitable[KubeApi]],
        path: str,
        *,
        selector: str,
        logger: logging.Logger,
        sync_timeout_s: float = 60.0,
        watch_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        self._connect = connect
        self.path = path
        self.selector = selector
        self._log = logger
        self._sync_timeout_s = sync_timeout_s
        self._watch_timeout_s = watch_timeout_s
        self.informer: Informer | None = None
        self._task: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._subscribers: list[Change] = []
        self.fallbacks = 0
        """Reads answered by a LIST because the informer did not follow the server (for tests and the bench)."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> Informer:
        """The informer, started on the first call; returns once it has listed, or failed to."""
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self.informer is None or not self.running:
                api = await self._connect()
                self.informer = Informer(
                    api, self.path, what="sandbox pods (cache)", logger=self._log, selector=self.selector,
                    on_change=self._changed, watch_timeout_s=self._watch_timeout_s,
                )  # fmt: skip
                self._task = asyncio.create_task(self.informer.run(), name="pod cache")
        informer = self.informer
        if informer.synced.is_set() or informer.failed.is_set():
            return informer
        waits = [asyncio.ensure_future(informer.synced.wait()), asyncio.ensure_future(informer.failed.wait())]
        try:
            done, _ = await asyncio.wait(waits, timeout=self._sync_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if not done:
            raise Unavailable(f"the pod cache could not list the pods within {self._sync_timeout_s:g} s")
        return informer

    async def pods(self) -> list[dict[str, Any]]:
        """Every pod of the owner: from the cache while it follows the server, else one paginated LIST (whose
        failure, if the server does not answer or refuses, is the caller's)."""
        informer = await self.start()
        written = informer.api.written.get(self.path, 0)  # this process's last write of a pod: read it back
        if informer.fresh and (written <= 0 or await informer.seen(written, WRITE_SEEN_S)) and informer.fresh:
            return list(informer.cache.values())
        self.fallbacks += 1
        api = await self._connect()
        listing = await api.list(self.path, what="list pods", selector=self.selector, page=LIST_PAGE)
        return [stripped(p) for p in listing.get("items") or []]

    def get(self, name: str) -> dict[str, Any] | None:
        """The pod as cached (None: not in the cache, or the cache does not follow the server now)."""
        informer = self.informer
        if informer is None or not informer.fresh:
            return None
        return informer.cache.get(name)

    async def wait_gone(self, name: str, *, timeout_s: float = WRITE_SEEN_S) -> None:
        """Return once the cache no longer holds pod ``name``, which the API server has confirmed removed (a delete's
        end is not a write of ours, so ``pods`` cannot wait for its version): its DELETED event arrives within
        milliseconds; after ``timeout_s`` the pod is dropped from the cache anyway (the server said it is gone)."""
        informer = self.informer
        if informer is None or name not in informer.cache:
            return
        gone = asyncio.Event()

        def on_change(kind: str, pod: dict[str, Any]) -> None:
            if kind == "DELETED" and (pod.get("metadata") or {}).get("name") == name:
                gone.set()

        stop = self.subscribe(on_change)
        try:
            if name in informer.cache:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gone.wait(), timeout_s)
        finally:
            stop()
        informer.forget(name)

    def subscribe(self, on_change: Change) -> Callable[[], None]:
        """Call ``on_change(kind, pod)`` with every change from now on; returns the call that stops it."""
        self._subscribers.append(on_change)
        return lambda: self._subscribers.remove(on_change) if on_change in self._subscribers else None

    def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(kind, pod)
            except Exception:
                self._log.exception("a pod cache subscriber failed on a %s event", kind)

    async def close(self) -> None:
        task, self._task, self.informer = self._task, None, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
