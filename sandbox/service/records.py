"""What the service keeps in the store, and under which names.

A sandbox's public id never changes; the backend *instance* serving it does (a reset swaps in
a warm replica, a recovery swaps in a replacement). Records are documents in the store, so
a restarted control plane, or another replica, sees every sandbox a client holds.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from sandbox.models import SandboxInfo, SandboxKind, SandboxSpec, SandboxState, SnapshotInfo

SANDBOXES = "sandboxes"
"""Collection: public sandbox id -> SandboxRecord."""
INSTANCES = "instances"
"""Collection: every backend instance the service started and has not yet removed -> InstanceRecord."""
SNAPSHOTS = "snapshots"
"""Collection: "<tenant>/<name>" -> SnapshotRecord."""
CREATED_COUNTER = "instances-created"
LEADER_LOCK = "leader"

# Lease fields and labels do not change what a container is: a warm instance fits any of them.
_NOT_PROVISIONING = {"labels", "ttl_s", "idle_timeout_s", "auto_recover", "snapshot"}


class LeaseEnd(NamedTuple):
    at: float
    cause: Literal["ttl", "idle"]
    why: str
    """For people: the tombstone's error says it."""


class SandboxRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    tenant: str
    spec: SandboxSpec
    state: SandboxState
    instance: str
    created_at: float
    last_active_at: float
    expires_at: float
    error: str | None = None
    replacements: int = 0

    def info(self) -> SandboxInfo:
        return SandboxInfo(
            id=self.id,
            tenant=self.tenant,
            kind=self.spec.kind,
            state=self.state,
            spec=self.spec,
            created_at=self.created_at,
            last_active_at=self.last_active_at,
            expires_at=self.expires_at,
            error=self.error,
            replacements=self.replacements,
        )

    def lease_end(self) -> LeaseEnd | None:
        """When and why the lease ends, if that moment has passed."""
        now = time.time()
        if now >= self.expires_at:
            return LeaseEnd(self.expires_at, "ttl", f"its ttl of {self.spec.ttl_s:g} s ran out")
        idle = self.spec.idle_timeout_s
        if idle is not None and now - self.last_active_at >= idle:
            return LeaseEnd(self.last_active_at + idle, "idle", f"it was idle for {idle:g} s")
        return None


class InstanceRecord(BaseModel):
    """A backend instance: serving a sandbox, warm in a pool, or being started."""

    model_config = ConfigDict(extra="forbid")

    id: str
    pool: str | None = None
    """The warm pool it waits in, until a sandbox takes it."""
    sandbox: str | None = None
    created_at: float


def kind_and_state(doc: dict[str, Any]) -> tuple[SandboxKind, SandboxState] | None:
    """A sandbox record's kind and state, read without validating the whole record (a scrape counts them all);
    None for a document that is not a sandbox record."""
    try:
        return SandboxKind(doc["spec"]["kind"]), SandboxState(doc["state"])
    except (KeyError, TypeError, ValueError):
        return None


def pool_key(spec: SandboxSpec, image: str) -> str:
    """Sandboxes whose specs share this key can use each other's warm instances."""
    fields = spec.model_dump(mode="json", exclude=_NOT_PROVISIONING)
    fields["image"] = image
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return f"pool:{spec.kind.value}:{digest[:16]}"


def snapshot_key(tenant: str, name: str) -> str:
    return f"{tenant}/{name}"


class SnapshotRecord(SnapshotInfo):
    """A snapshot and the spec of the sandbox it was taken from: what its warm replicas start with,
    even after that sandbox is gone, on whichever replica leads."""

    spec: SandboxSpec | None = None

    def info(self) -> SnapshotInfo:
        return SnapshotInfo.model_validate(self.model_dump(exclude={"spec"}))

    def replica_spec(self) -> SandboxSpec | None:
        return None if self.spec is None else self.spec.model_copy(update={"snapshot": self.name})
