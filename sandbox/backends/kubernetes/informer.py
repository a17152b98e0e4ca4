"""A list + watch cache of one kind of object (what client-go calls an informer), on the backend's ``KubeApi``.

``run`` lists the objects (from the API server's watch cache: ``resourceVersion=0``, in pages), then watches from the
list's resourceVersion with bookmarks on (a bookmark moves the version on without a change, so a quiet watch that
ends resumes from a recent version, not from one the server has long forgotten); when the watch ends (its timeout)
it opens another from the last version seen, and when the version is too old (410 Gone: the server keeps a few
minutes of history) or the API server does not answer, it lists again. Objects are cached without their
``metadata.managedFields`` (server-side apply's bookkeeping, often the biggest part of a pod, never read here).
``fresh`` says whether the cache follows the server now (listed, and no failure since): a reader that needs the
server's word falls back to a LIST while it does not. ``cache`` holds every object by name; ``on_change`` is
called, synchronously, with each change (ADDED, MODIFIED, DELETED), including those a new listing reveals (objects
gone while nobody watched are DELETED).

Writers call ``note`` with the object the API server answered a write with, so the cache never lags behind the
writer's own writes (a watch event older than what is cached is ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sandbox.backends.kubernetes.api import Expired, KubeApi
from sandbox.errors import SandboxError

Change = Callable[[str, dict[str, Any]], None]
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
LIST_PAGE = 500
"""Items a page when the listing is paginated (client-go's reflector asks for 500)."""


def stripped(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``metadata.managedFields`` (in place; returned for convenience)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _version(obj: dict[str, Any]) -> int | None:
    raw = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isdigit() else None


def newer(obj: dict[str, Any], than: dict[str, Any] | None) -> bool:
    """Whether ``obj`` is at least as recent as ``than`` (resourceVersions compared as numbers, as etcd makes them;
    a version that is not a number is taken as newer)."""
    if than is None:
        return True
    mine, theirs = _version(obj), _version(than)
    return mine is None or theirs is None or mine >= theirs


class Informer:
    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        what: str,
        logger: logging.Logger,
        selector: str = "",
        on_change: Change | None = None,
        watch_timeout_s: float = 300.0,
    ) -> None:
        self.api = api
        self.path = path
        self.what = what
        self.selector = selector
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        """Set once the first listing is in the cache."""
        self.fresh = False
        """Listed, and neither the watch nor a listing failed since."""
        self.version = ""
        """The last resourceVersion seen (an object's, a listing's or a bookmark's)."""
        self.failed = asyncio.Event()
        """Set while the last listing or watch failed (cleared by the next listing)."""
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.relists = 0
        """Listings made after the first (410 Gone, a failure): for tests and the bench."""
        self._on_change = on_change
        self._watch_timeout_s = watch_timeout_s
        self._log = logger

    async def run(self) -> None:
        failures = 0
        version = ""
        while True:
            try:
                if not version:
                    version = await self._list()
                version = await self._watch(version)
                failures = 0
            except Expired as e:  # routine: the history moved past the version; list again at once
                self._log.debug("%s: %s; listing again", self.what, e.message)
                version = ""
            except SandboxError as e:
                self.fresh = False
                self.failed.set()
                delay = BACKOFF_S[min(failures, len(BACKOFF_S) - 1)]
                failures += 1
                self._log.log(
                    logging.INFO if failures == 1 else logging.WARNING,
                    "%s: %s; listing again in %.1f s",
                    self.what,
                    e.message,
                    delay,
                )
                version = ""
                await asyncio.sleep(delay)

    async def _list(self) -> str:
        if self.synced.is_set():
            self.relists += 1
        listing = await self.api.list(
            self.path, what=f"list {self.what}", selector=self.selector, page=LIST_PAGE, resource_version="0"
        )
        found = {obj["metadata"]["name"]: stripped(obj) for obj in listing.get("items") or []}
        for name in [n for n in self.cache if n not in found]:
            self._change("DELETED", self.cache.pop(name))
        for name, obj in found.items():
            before = self.cache.get(name)
            if before is None or before != obj:
                self.cache[name] = obj
                self._change("ADDED" if before is None else "MODIFIED", obj)
        self.synced.set()
        self.failed.clear()
        self.fresh = True
        self._seen(str((listing.get("metadata") or {}).get("resourceVersion") or ""))
        return self.version

    async def _watch(self, version: str) -> str:
        events = self.api.watch(
            self.path,
            what=f"watch {self.what}",
            resource_version=version,
            timeout_s=self._watch_timeout_s,
            selector=self.selector,
        )
        async with contextlib.aclosing(events):
            async for kind, obj in events:
                meta = stripped(obj).get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                name = str(meta.get("name") or "")
                if kind == "BOOKMARK":
                    continue
                if kind == "DELETED":
                    gone = self.cache.pop(name, None)
                    self._change("DELETED", gone if gone is not None else obj)
                elif kind in ("ADDED", "MODIFIED") and newer(obj, self.cache.get(name)):
                    self.cache[name] = obj
                    self._change(kind, obj)
                self._seen(version)
        return version

    def _seen(self, version: str) -> None:
        self.version = version
        if not self._waiting or not version.isdigit():
            return
        reached, left = int(version), []
        for wanted, future in self._waiting:
            if wanted <= reached:
                if not future.done():
                    future.set_result(None)
            else:
                left.append((wanted, future))
        self._waiting = left

    async def seen(self, version: int, timeout_s: float) -> bool:
        """Whether the cache has seen ``version`` (a write's answer), waiting up to ``timeout_s`` for its event."""
        if self.version.isdigit() and int(self.version) >= version:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((version, future))
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            return False
        finally:
            self._waiting = [(v, f) for v, f in self._waiting if f is not future]
        return True

    def _change(self, kind: str, obj: dict[str, Any]) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(kind, obj)
        except Exception:
            self._log.exception("%s: handling a %s event failed", self.what, kind)

    def note(self, obj: dict[str, Any]) -> None:
        """The object as a write of ours left it (the API server's answer)."""
        name = (obj.get("metadata") or {}).get("name")
        if name and newer(obj, self.cache.get(name)):
            self.cache[name] = stripped(obj)

    def forget(self, name: str) -> None:
        self.cache.pop(name, None)
