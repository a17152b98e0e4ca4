"""What the engine says of a container, as a :class:`BackendInstance`: its state, creation time, exit code and
labels, from an inspected container or from a listing's summary (which needs no inspection of each one)."""

from __future__ import annotations

import contextlib
import re
from datetime import datetime
from typing import Any

from docker.models.containers import Container

from sandbox.backends.base import LABEL_INSTANCE, LABEL_KIND, BackendInstance, RuntimeState
from sandbox.models import SandboxKind


def _state_of(container: Container) -> RuntimeState:
    status = container.status
    if status in ("running",):
        return RuntimeState.RUNNING
    if status in ("created", "restarting"):
        return RuntimeState.STARTING
    if status == "paused":
        return RuntimeState.PAUSED
    return RuntimeState.EXITED


def _created_at(container: Container) -> float:
    return timestamp(str(container.attrs.get("Created", "")))


def timestamp(raw: str) -> float:
    """The engine's RFC 3339 time (nanoseconds, Z) as a Unix time; 0 when it does not parse."""
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(raw[:26].rstrip("Z") + "+00:00").timestamp()
    return 0.0


NOT_RUNNING = ["created", "restarting", "removing", "paused", "exited", "dead"]
"""Every container status but ``running``, as the engine's listing filters name them."""


def from_summary(summary: dict[str, Any]) -> BackendInstance:
    labels = dict(summary.get("Labels") or {})
    status = str(summary.get("State", ""))
    state = {
        "running": RuntimeState.RUNNING,
        "created": RuntimeState.STARTING,
        "restarting": RuntimeState.STARTING,
        "paused": RuntimeState.PAUSED,
    }
    exit_code = re.search(r"Exited \((-?\d+)\)", str(summary.get("Status", "")))
    return BackendInstance(
        id=labels.get(LABEL_INSTANCE, ""),
        kind=SandboxKind(labels.get(LABEL_KIND, "terminal")),
        ref=str(summary.get("Id", "")),
        state=state.get(status, RuntimeState.EXITED),
        labels=labels,
        created_at=float(summary.get("Created") or 0),
        exit_code=int(exit_code.group(1)) if exit_code else None,
    )


def describe(container: Container) -> BackendInstance:
    labels = dict(container.labels)
    exit_code = container.attrs.get("State", {}).get("ExitCode")
    state = _state_of(container)
    return BackendInstance(
        id=labels.get(LABEL_INSTANCE, ""),
        kind=SandboxKind(labels.get(LABEL_KIND, "terminal")),
        ref=container.id or "",
        state=state,
        labels=labels,
        created_at=_created_at(container),
        exit_code=exit_code if state is RuntimeState.EXITED else None,
    )
