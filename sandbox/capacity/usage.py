"""What a sandbox reserves and what a host offers, in the three resources the model counts."""

from __future__ import annotations

from dataclasses import dataclass

RESOURCES = ("cpus", "memory_mb", "pids")


@dataclass(frozen=True, slots=True)
class Usage:
    cpus: float = 0.0
    memory_mb: float = 0.0
    pids: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpus + other.cpus, self.memory_mb + other.memory_mb, self.pids + other.pids)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.cpus - other.cpus, self.memory_mb - other.memory_mb, self.pids - other.pids)

    def times(self, count: int) -> Usage:
        return Usage(self.cpus * count, self.memory_mb * count, self.pids * count)

    def fits_in(self, room: Usage) -> bool:
        # A thousandth of a CPU or a MiB of slack: sums of floats must not refuse an exact fit.
        return self.cpus <= room.cpus + 1e-6 and self.memory_mb <= room.memory_mb + 1e-6 and self.pids <= room.pids

    def short_of(self, room: Usage) -> list[str]:
        """The resources ``room`` lacks for this, each as ``"memory: 4,096 MiB asked, 1,200 MiB free"``."""
        short = []
        if self.memory_mb > room.memory_mb + 1e-6:
            short.append(f"memory: {self.memory_mb:,.0f} MiB asked, {max(0.0, room.memory_mb):,.0f} MiB free")
        if self.cpus > room.cpus + 1e-6:
            short.append(f"CPU: {self.cpus:,.2f} asked, {max(0.0, room.cpus):,.2f} free")
        if self.pids > room.pids:
            short.append(f"pids: {self.pids:,} asked, {max(0, room.pids):,} free")
        return short

    def how_many_fit(self, room: Usage) -> int:
        """How many of this fit in ``room`` (the binding resource decides)."""
        counts = []
        if self.cpus > 0:
            counts.append(int((room.cpus + 1e-6) // self.cpus))
        if self.memory_mb > 0:
            counts.append(int((room.memory_mb + 1e-6) // self.memory_mb))
        if self.pids > 0:
            counts.append(room.pids // self.pids)
        return max(0, min(counts)) if counts else 0

    def scaled(self, share: float) -> Usage:
        return Usage(self.cpus * share, self.memory_mb * share, int(self.pids * share))

    def as_dict(self) -> dict[str, float]:
        return {"cpus": round(self.cpus, 3), "memory_mb": round(self.memory_mb, 1), "pids": self.pids}


ZERO = Usage()
