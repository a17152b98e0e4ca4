"""The kernel's word on memory pressure (PSI, /proc/pressure/memory), with hysteresis: admission stops when the
share of time tasks stall on memory reaches ``high`` and resumes only once it falls below ``low``, so one noisy
reading neither stops nor restarts it."""

from __future__ import annotations

import time
from pathlib import Path

PSI_MEMORY = Path("/proc/pressure/memory")
READ_EVERY_S = 1.0


def read_some_avg10(path: Path = PSI_MEMORY) -> float | None:
    """``some avg10`` of a PSI file (percent), or None when the kernel has no PSI."""
    try:
        first = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = dict(part.split("=", 1) for part in first.split()[1:] if "=" in part)
    try:
        return float(fields["avg10"])
    except (KeyError, ValueError):
        return None


class MemoryPressure:
    def __init__(self, *, high: float, low: float, path: Path = PSI_MEMORY) -> None:
        self.high = high
        self.low = min(low, high)
        self._path = path
        self._under = False
        self._read_at = 0.0
        self.last: float | None = None

    @property
    def available(self) -> bool:
        return read_some_avg10(self._path) is not None

    def under_pressure(self) -> bool:
        """Whether admission should stop (read at most once a second: procfs is cheap, not free)."""
        if self.high <= 0:
            return False
        now = time.monotonic()
        if now - self._read_at >= READ_EVERY_S:
            self._read_at = now
            self.last = read_some_avg10(self._path)
            if self.last is not None:
                if self._under and self.last < self.low:
                    self._under = False
                elif not self._under and self.last >= self.high:
                    self._under = True
        return self._under

    def describe(self) -> str:
        return f"the host is under memory pressure (PSI memory some avg10 = {self.last or 0:.1f}%)"
