"""Callers waiting for capacity: first come first served within a tenant, tenants served in turn, so one tenant's
flood of waiting creates does not starve another's single one. The head of the order is served first and nothing
overtakes it (a large group is not starved by small creates behind it)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Waiter:
    tenant: str
    kind: str
    count: int
    demand: Any
    """What the admission checks for it (opaque here)."""
    deadline: float
    ticket: int = 0
    since: float = field(default_factory=time.time)
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class WaitQueue:
    def __init__(self) -> None:
        self._by_tenant: dict[str, deque[Waiter]] = {}
        self._tickets = itertools.count(1)

    def __len__(self) -> int:
        return sum(len(q) for q in self._by_tenant.values())

    def add(self, waiter: Waiter) -> None:
        waiter.ticket = next(self._tickets)
        self._by_tenant.setdefault(waiter.tenant, deque()).append(waiter)

    def remove(self, waiter: Waiter) -> None:
        queue = self._by_tenant.get(waiter.tenant)
        if queue is None:
            return
        try:
            queue.remove(waiter)
        except ValueError:
            return
        if not queue:
            del self._by_tenant[waiter.tenant]

    def order(self) -> list[Waiter]:
        """Everyone waiting, in the order they will be served: each tenant's first (by arrival of the tenant's
        oldest), then each tenant's second, and so on."""
        queues = sorted(self._by_tenant.values(), key=lambda q: q[0].ticket)
        return [w for rank in itertools.zip_longest(*queues) for w in rank if w is not None]
