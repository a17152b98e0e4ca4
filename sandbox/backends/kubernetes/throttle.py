"""How fast this replica talks to the API server: a client-side token bucket (client-go's ``QPS`` and ``Burst``), and
the server's own word when it throttles (429 Too Many Requests with ``Retry-After``, from API Priority and Fairness
or a proxy in front of it).

A burst of creates (hundreds of sandboxes asked for at once, a warm pool refilling) would otherwise send every call at
once; the API server's priority levels then queue or reject them for every client of the cluster, not just this one.
With the bucket, up to ``burst`` calls go at once, and then ``qps`` a second: a call waits its turn (in the order
they came) instead of failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

RETRY_AFTER_DEFAULT_S = 1.0
"""The wait after a 429 that names none (the API server's own default answer says 1 s)."""
RETRY_AFTER_MAX_S = 10.0
"""The longest wait after one 429: a server asking for more is answered with an error sooner."""
RETRIES_429 = 5
"""How many times a call answered 429 is sent again before it fails (Unavailable, "throttling")."""


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; each call takes one, waiting while there is none. Tokens
    are reserved in the order calls come (the count goes below zero, and each waits for its own share), so a steady
    stream of calls is served first come, first served. ``qps`` 0: no limit."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._at: float | None = None
        self.waited_s = 0.0
        """The total time calls waited here (for tests and metrics)."""

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        now = asyncio.get_running_loop().time()
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return
        wait = -self._tokens / self.qps
        self.waited_s += wait
        try:
            await asyncio.sleep(wait)
        except asyncio.CancelledError:
            self._tokens += 1.0  # the call will not be made: its token goes back
            raise


def retry_after(headers: Mapping[str, Any] | None) -> float:
    """The wait a 429's ``Retry-After`` asks for (seconds; the HTTP-date form is not used by the API server), within
    [0, RETRY_AFTER_MAX_S]."""
    raw = (headers or {}).get("Retry-After")
    try:
        delay = float(raw) if raw is not None else RETRY_AFTER_DEFAULT_S
    except (TypeError, ValueError):
        delay = RETRY_AFTER_DEFAULT_S
    return min(max(delay, 0.0), RETRY_AFTER_MAX_S)
