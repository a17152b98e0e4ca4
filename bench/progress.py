"""Progress lines on stderr (stdout is for the table), each stamped with the time since the run began."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, *, every_s: float = 3.0) -> None:
        self._stream = stream or sys.stderr
        self._every_s = every_s
        self._started = time.monotonic()
        self._last: dict[str, float] = {}

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def say(self, message: str) -> None:
        print(f"[bench {self.elapsed:7.1f}s] {message}", file=self._stream, flush=True)

    def count(self, label: str, done: int, total: int) -> None:
        """``label: done/total``, at most every few seconds (and always at the end)."""
        now = time.monotonic()
        if done >= total or now - self._last.get(label, 0.0) >= self._every_s:
            self._last[label] = now
            self.say(f"{label}: {done}/{total}")
