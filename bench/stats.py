"""Summaries of samples: percentiles by linear interpolation between closest ranks (as numpy's default)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``samples``, interpolating linearly between the two closest ranks."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    """Latency samples, in seconds."""

    n: int
    p50: float
    p99: float
    mean: float
    min: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        return cls(
            n=len(samples),
            p50=percentile(samples, 50),
            p99=percentile(samples, 99),
            mean=sum(samples) / len(samples),
            min=min(samples),
            max=max(samples),
        )

    def to_json(self) -> dict[str, Any]:
        return {"kind": "latency_s", **asdict(self)}


@dataclass(frozen=True)
class Value:
    """One measured number that is not a latency: a rate, a count, a size."""

    value: float
    unit: str
    n: int | None = None
    """How many observations it stands for (steps counted, sandboxes held), if that means something."""

    def to_json(self) -> dict[str, Any]:
        return {"kind": "value", **asdict(self)}


Metric = Summary | Value


def speedup(baseline: float, ours: float) -> float | None:
    """How many times faster ours is: ``baseline / ours`` (None when ours is zero)."""
    return baseline / ours if ours > 0 else None


def gain(ours: float, baseline: float) -> float | None:
    """How many times more ours does per unit of time: ``ours / baseline`` (None when the baseline is zero)."""
    return ours / baseline if baseline > 0 else None
