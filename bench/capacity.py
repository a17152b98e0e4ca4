"""The control plane's capacity model as the bench uses it: the engine's host, the model's limit on it for a kind's
default spec (set beside the density measured), and the host memory that makes the model hold a given number of
sandboxes (the admission section's small, full host).

The model is the platform's own (``sandbox.capacity.model.CapacityModel``), given the host facts the docker backend
reads (``docker info``'s memory and CPUs, the kernel's pid limit), so its numbers are the ones a control plane with
the same settings computes.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from bench import BenchError
from bench.baseline import DockerCli
from sandbox.backends.base import HostFacts
from sandbox.backends.docker.host import host_facts, is_local
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.settings import CapacitySettings
from sandbox.models import SandboxKind, SandboxSpec

TOLERANCE = 0.2
"""The model's default limit should land within this share of the density measured (issue 30)."""


async def engine_info(docker: DockerCli) -> dict[str, Any]:
    """``docker info``'s document."""
    done = await docker("info", "--format", "{{json .}}")
    try:
        info = json.loads(done.stdout)
    except ValueError as e:
        raise BenchError(f"docker info did not print JSON: {done.stdout[:200]!r}") from e
    if not isinstance(info, dict):
        raise BenchError(f"docker info printed {type(info).__name__}, not an object")
    return info


def engine_host(info: dict[str, Any], *, memory_mb: float | None = None) -> HostFacts:
    """The host as a control plane on this engine sees it (``memory_mb``: its ``capacity.host_memory_mb``)."""
    local = is_local(os.environ.get("DOCKER_HOST"))
    return host_facts(info, local=local, memory_mb=memory_mb, cpus=None, pids=None)


def model_limit(host: HostFacts, kind: str, settings: CapacitySettings | None = None) -> int:
    """How many sandboxes of ``kind``'s default spec the model lets an empty ``host`` hold."""
    limit = CapacityModel(settings or CapacitySettings(), host).limit_for(SandboxSpec(kind=SandboxKind(kind)))
    if limit is None:
        raise BenchError("the capacity model is disabled in these settings")
    return limit


def host_memory_for(count: int, kind: str, host: HostFacts, settings: CapacitySettings | None = None) -> int:
    """The host memory (MiB) with which the model holds exactly ``count`` sandboxes of ``kind``'s default spec, the
    host's CPUs and pids otherwise: memory binds, with half a sandbox's request to spare."""
    settings = settings or CapacitySettings()
    request = CapacityModel(settings, None).reservation(SandboxSpec(kind=SandboxKind(kind))).memory_mb
    wanted = (count + 0.5) * request / settings.memory_overcommit
    # allocatable = (memory - max(reserve_mb, memory x fraction)) x overcommit: whichever reserve binds.
    memory = math.ceil(max(settings.memory_reserve_mb + wanted, wanted / (1 - settings.memory_reserve_fraction)))
    small = HostFacts(cpus=host.cpus, memory_mb=memory, pids=host.pids)
    got = model_limit(small, kind, settings)
    if got != count:
        raise BenchError(f"a host of {memory} MiB holds {got} {kind}s, not {count}: its CPUs or pids bind first")
    return memory


def within(measured: int, model: int, tolerance: float = TOLERANCE) -> bool:
    """Whether the model's limit lands within ``tolerance`` of the density measured."""
    return measured > 0 and abs(model - measured) <= tolerance * measured


def describe_limit(measured: int, model: int, stopped: str) -> str:
    """``measured N (why the ramp stopped) / model M = N/M``."""
    ratio = f"{measured / model:.2f}" if model > 0 else "-"
    return f"measured {measured} ({stopped}) / model {model} = {ratio}"
