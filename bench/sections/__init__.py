"""The sections, in the order a full run measures them; each is ``async def run(bench) -> SectionResult``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bench.harness import Bench, SectionResult
from bench.sections import (
    admission,
    burst,
    create,
    density,
    games,
    k8s_scale,
    observe,
    osworld,
    preview,
    reset,
    step,
    tasks,
    throughput,
)

Section = Callable[[Bench], Awaitable[SectionResult]]

SECTIONS: dict[str, Section] = {
    "create": create.run,
    "burst": burst.run,
    "admission": admission.run,
    "step": step.run,
    "observe": observe.run,
    "reset": reset.run,
    "throughput": throughput.run,
    "preview": preview.run,
    "density": density.run,
    "games": games.run,
    "tasks": tasks.run,
    "osworld": osworld.run,
    "k8s-scale": k8s_scale.run,
}
