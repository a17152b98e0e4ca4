"""A list + watch cache of one kind of object (what client-go calls an informer), on the backend's ``KubeApi``.

``run`` lists the objects, then watches from the list's resourceVersion; when the watch ends (its timeout) it opens
another from the last version seen, and when the version is too old (410 Gone) or the API server does not answer,
it lists again. ``cache`` holds every object by name; ``on_change`` is called, synchronously, with each change
(ADDED, MODIFIED, DELETED), including those a new listing reveals (objects gone while nobody watched are DELETED).

Writers call ``note`` with the object the API server answered a write with, so the cache never lags behind the
writer's own writes (a watch event older than what is cached is ignored).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.errors import SandboxError

Change = Callable[[str, dict[str, Any]], None]
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


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
            except SandboxError as e:
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
        listing = await self.api.list(self.path, what=f"list {self.what}", selector=self.selector)
        found = {obj["metadata"]["name"]: obj for obj in listing.get("items") or []}
        for name in [n for n in self.cache if n not in found]:
            self._change("DELETED", self.cache.pop(name))
        for name, obj in found.items():
            before = self.cache.get(name)
            if before is None or before != obj:
                self.cache[name] = obj
                self._change("ADDED" if before is None else "MODIFIED", obj)
        self.synced.set()
        return str((listing.get("metadata") or {}).get("resourceVersion") or "")

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
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                name = str(meta.get("name") or "")
                if kind == "DELETED":
                    gone = self.cache.pop(name, None)
                    self._change("DELETED", gone if gone is not None else obj)
                elif kind in ("ADDED", "MODIFIED") and newer(obj, self.cache.get(name)):
                    self.cache[name] = obj
                    self._change(kind, obj)
        return version

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
            self.cache[name] = obj

    def forget(self, name: str) -> None:
        self.cache.pop(name, None)
