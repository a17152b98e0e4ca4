"""A flood of creates against a full host, from a process of its own: ``python -m bench.flood TARGET LOOPS SECONDS``.

The admission section starts it, so that its own probes of the control plane during the flood share neither this
event loop nor this GIL (what they measure is the control plane, not the bench's client). ``LOOPS`` loops send
``create("terminal")`` back to back for ``SECONDS`` (and at most ``MAX_CALLS`` calls in all); each one should be
refused at once (RESOURCE_EXHAUSTED). One that is not is deleted at once and counted as admitted.

It prints one JSON line when the flood starts (after one untimed create has connected it) and one with its tally when
it ends, then exits; the section stops it by its PID if it does not.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.stats import Summary
from sandbox.client import AsyncClient
from sandbox.errors import ResourceExhausted, SandboxError

MAX_CALLS = 300_000
"""Bounds the flood's count (and the latencies it keeps) whatever its duration."""
KIND = "terminal"


@dataclass
class Tally:
    refused: list[float] = field(default_factory=list)
    """The latency of each refused create, in seconds."""
    admitted: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    """Calls that failed otherwise, by the exception's class."""
    seconds: float = 0.0
    warmup: int = 0
    """Untimed calls before the flood (refused too)."""

    @property
    def calls(self) -> int:
        return len(self.refused) + self.admitted + sum(self.errors.values())

    @property
    def rate(self) -> float:
        return len(self.refused) / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "refused": len(self.refused),
            "admitted": self.admitted,
            "errors": dict(self.errors),
            "seconds": self.seconds,
            "rate": self.rate,
            "warmup": self.warmup,
            "latency": Summary.of(self.refused).to_json() if self.refused else None,
        }


def summary_of(document: dict[str, Any] | None) -> Summary | None:
    """A ``Summary`` back from its JSON (``Summary.to_json``)."""
    if document is None:
        return None
    return Summary(**{k: document[k] for k in ("n", "p50", "p99", "mean", "min", "max")})


async def flood(
    attempt: Callable[[], Awaitable[None]],
    loops: int,
    seconds: float,
    *,
    max_calls: int = MAX_CALLS,
    clock: Callable[[], float] = time.perf_counter,
) -> Tally:
    """``loops`` loops calling ``attempt`` back to back until ``seconds`` have passed or ``max_calls`` were made:
    ``ResourceExhausted`` is a refusal (timed), a return an admission, another ``SandboxError`` an error."""
    tally = Tally()
    started = clock()
    end = started + seconds

    async def loop() -> None:
        while tally.calls < max_calls:
            begun = clock()
            if begun >= end:
                return
            try:
                await attempt()
            except ResourceExhausted:
                tally.refused.append(clock() - begun)
            except SandboxError as e:
                tally.errors[type(e).__name__] += 1
            else:
                tally.admitted += 1

    await asyncio.gather(*(loop() for _ in range(loops)))
    tally.seconds = clock() - started
    return tally


async def _main(target: str, loops: int, seconds: float) -> dict[str, Any]:
    async with AsyncClient(target, timeout=60) as client:

        async def attempt() -> None:
            sandbox = await client.create(KIND)
            await sandbox.close()  # admitted on a full host: the section reports it

        warm = await flood(attempt, 1, 60.0, max_calls=1)  # one call: the channel is up before the clock starts
        print(json.dumps({"started": True}), flush=True)
        tally = await flood(attempt, loops, seconds)
        tally.warmup = warm.calls
        tally.admitted += warm.admitted
        tally.errors.update(warm.errors)
        return tally.to_json()


def main(argv: Sequence[str]) -> None:
    target, loops, seconds = argv[0], int(argv[1]), float(argv[2])
    print(json.dumps(asyncio.run(_main(target, loops, seconds))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
