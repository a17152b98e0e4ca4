"""Resource quantities as the API server reads and prints them ("500m", "2", "512Mi", "1Gi"), and what a pod asks
for: the sums the fake scheduler (scheduler.py) and the ResourceQuota admission (quota.py) compare with their limits.

Exact arithmetic (Fraction): "1500m" of CPU is 3/2, "1Gi" of memory 1073741824.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{f"{p}i": Fraction(2 ** (10 * (i + 1))) for i, p in enumerate("KMGTPE")},
}
_QUANTITY = re.compile(r"^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))

ZERO = Fraction(0)


def parse(raw: Any) -> Fraction:
    """A quantity (a string, or a number as YAML gives it); ValueError for anything else."""
    if isinstance(raw, bool):
        raise ValueError(f"not a quantity: {raw!r}")
    if isinstance(raw, int | float):
        return Fraction(str(raw))
    found = _QUANTITY.match(str(raw).strip())
    if found is None:
        raise ValueError(f"not a quantity: {raw!r}")
    return Fraction(found.group(1)) * _SUFFIXES[found.group(2) or ""]


def show(resource: str, value: Fraction) -> str:
    """``value`` of ``resource`` as the API server prints it: CPU in cores or millicores, bytes in the largest
    binary unit that divides them, counts as integers."""
    if resource.endswith("cpu"):
        return str(int(value)) if value.denominator == 1 else f"{int(value * 1000)}m"
    if value.denominator == 1 and resource.endswith(("memory", "storage")):
        for suffix, size in _BINARY:
            if value and value.numerator % size == 0:
                return f"{value.numerator // size}{suffix}"
    return str(int(value)) if value.denominator == 1 else str(float(value))


def pod_resources(pod: dict[str, Any]) -> dict[str, Fraction]:
    """What the pod's containers request and are limited to, summed: ``requests.cpu``, ``requests.memory``,
    ``limits.cpu``, ``limits.memory`` (and any other resource they name, e.g. ``limits.ephemeral-storage``). A resource
    with a limit and no request is requested at its limit, as the API server's defaulting makes it. Init containers
    are not counted (the platform's pods have none)."""
    total: dict[str, Fraction] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        limits = {str(k): parse(v) for k, v in (resources.get("limits") or {}).items()}
        requests = {**limits, **{str(k): parse(v) for k, v in (resources.get("requests") or {}).items()}}
        for kind, values in (("requests", requests), ("limits", limits)):
            for resource, value in values.items():
                total[f"{kind}.{resource}"] = total.get(f"{kind}.{resource}", ZERO) + value
    return total


def states(pod: dict[str, Any], resource: str) -> bool:
    """Whether every container of the pod states ``resource`` ("limits.cpu": a CPU limit; "requests.memory": a memory
    request, or a limit that defaults it)."""
    kind, _, name = resource.partition(".")
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        stated = set(resources.get("limits") or {})
        if kind == "requests":
            stated |= set(resources.get("requests") or {})
        if name not in stated:
            return False
    return True
