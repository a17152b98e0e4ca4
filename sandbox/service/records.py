"""What the service keeps in the store, and under which names.

A sandbox's public id never changes; the backend *instance* serving it does (a reset swaps in
a warm instance, a recovery swaps in a replacement). Records are documents in the store, so
a restarted control plane, or another replica, sees every sandbox a client holds.

Every record read from the store carries the document's ``version`` (not stored in the document);
a write that follows an await is a compare-and-set on it, so a stale write is refused, never applied.
"""

from __future__ import annotations

import enum
import hashlib
import json
import secrets
import time
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from sandbox.memo import IdentityMemo
from sandbox.models import SandboxInfo, SandboxKind, SandboxSpec, SandboxState, SnapshotInfo

SANDBOXES = "sandboxes"
"""Collection: public sandbox id -> SandboxRecord."""
INSTANCES = "instances"
"""Collection: every backend instance the service started and has not yet removed -> InstanceRecord."""
SNAPSHOTS = "snapshots"
"""Collection: "<tenant>/<name>" -> SnapshotRecord."""
TASKS = "tasks"
"""Collection: "<tenant>/<task hash>" -> the task's document, for whichever replica evaluates its episode."""
FIXTURES = "fixtures"
"""Collection: "<tenant>/<sha256>" -> a file a task downloads that the server's fixtures lack (``task_store``)."""
META = "meta"
"""Collection: facts about the store itself."""
EPOCH = "epoch"
"""Key in META: written once into a store; its absence means the store lost its data (a Redis restarted empty)."""
CREATED_COUNTER = "instances-created"
LEADER_LOCK = "leader"


def replica_lock(replica: str) -> str:
    """The lock a live replica keeps renewed, so that others can tell it is alive."""
    return f"replica:{replica}"


def new_sandbox_id(kind: SandboxKind) -> str:
    """A lease's public id: ``sb-<kind>-<12 hex>``."""
    return f"sb-{kind.value[:4]}-{secrets.token_hex(6)}"


def new_instance_id(kind: SandboxKind) -> str:
    """An engine instance's id: ``in-<kind>-<12 hex>`` (never confused with a sandbox id)."""
    return f"in-{kind.value[:4]}-{secrets.token_hex(6)}"


# Lease fields and labels do not change what a container is: a warm instance fits any of them.
_NOT_PROVISIONING = {"labels", "ttl_s", "idle_timeout_s", "auto_recover", "snapshot"}
_pool_keys: IdentityMemo[SandboxSpec, str] = IdentityMemo()


class LeaseEnd(NamedTuple):
    at: float
    cause: Literal["ttl", "idle"]
    why: str
    """For people: the tombstone's error says it."""


class EpisodeRecord(BaseModel):
    """The episode a sandbox runs: the task it was reset to, and how far it went (see ``service.episodes``)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str
    digest: str
    """The digest of what decides the task's post-setup state: the name of its snapshot."""
    task_hash: str
    """The SHA-256 of the whole task: its document in TASKS, which the evaluation reads."""
    trajectory_id: str
    started_at: float
    max_steps: int | None = None
    max_seconds: float | None = None
    steps: int = 0
    done: bool = False
    truncated: bool = False
    reason: str | None = None
    """Why it ended: done, fail, step_limit, time_limit."""
    ended_at: float | None = None
    last_action: str | None = None
    """The last action: "DONE", "FAIL", "WAIT", or its type (OSWorld's evaluators read it)."""
    reward: float | None = None
    recording_since: float | None = None
    """When the running segment of the episode's screen recording began (``reset(task, record=True)``, android);
    None: none runs (none asked for, it could not start, or it was stopped at the episode's end)."""

    @model_serializer(mode="wrap")
    def _without_unset_recording(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when None, so a replica of the previous version (whose record forbids unknown fields) still
        # reads every episode but a recording one during a rolling upgrade.
        data: dict[str, Any] = handler(self)
        if data.get("recording_since") is None:
            data.pop("recording_since", None)
        return data

    def summary(self) -> dict[str, Any]:
        """The ``Observation.info`` of a step: where the episode stands."""
        return {
            "steps": self.steps,
            "truncated": self.truncated,
            "reason": self.reason,
            "task_id": self.task_id,
            "trajectory_id": self.trajectory_id,
        }


class SandboxRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = Field(0, exclude=True)
    """The store's version of the document this was read from (0: not read from the store)."""
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
    """Times a failed instance was recovered: started again in place, or replaced."""
    episode: EpisodeRecord | None = None
    """The episode of a task the sandbox runs since its last reset to one (None after a plain reset)."""

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

    def claim(self) -> dict[str, Any]:
        """What the instance carries on the engine side, enough to rebuild this record if the store loses it."""
        return self.model_dump(
            mode="json", include={"id", "tenant", "spec", "created_at", "expires_at", "replacements"}
        )

    @classmethod
    def from_claim(cls, claim: dict[str, Any], instance: str) -> SandboxRecord:
        now = time.time()
        return cls.model_validate({**claim, "instance": instance, "state": SandboxState.RUNNING, "last_active_at": now})

    def lease_end(self) -> LeaseEnd | None:
        """When and why the lease ends, if that moment has passed."""
        now = time.time()
        if now >= self.expires_at:
            return LeaseEnd(self.expires_at, "ttl", f"its ttl of {self.spec.ttl_s:g} s ran out")
        idle = self.spec.idle_timeout_s
        if idle is not None and now - self.last_active_at >= idle:
            return LeaseEnd(self.last_active_at + idle, "idle", f"it was idle for {idle:g} s")
        return None


class InstanceState(enum.StrEnum):
    """Where an instance is in its life. Every change is a compare-and-set on the instance's record, so a
    claim (WARM -> SERVING) and a removal (any -> RETIRING) of the same instance never both succeed."""

    STARTING = "starting"
    """The record is written before the engine is asked: a crash mid-start leaves a record to clean up."""
    WARM = "warm"
    """Started, waiting in its pool's queue."""
    SERVING = "serving"
    """Claimed by a sandbox (whose record names it once the claim is complete)."""
    RETIRING = "retiring"
    """Being removed; nothing may hand it out."""


class InstanceRecord(BaseModel):
    """A backend instance: being started, warm in a pool, serving a sandbox, or being removed."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(0, exclude=True)
    id: str
    state: InstanceState = InstanceState.STARTING
    pool: str | None = None
    """The warm pool it was started for."""
    sandbox: str | None = None
    """The sandbox it serves (or was started for)."""
    created_at: float
    since: float = 0.0
    """When it entered its state."""
    owner: str | None = None
    """The control-plane replica that started or claimed it: while that replica lives, a start or a claim in
    progress is its own business, however long the engine takes."""
    tenant: str | None = None
    """The tenant whose sandbox it serves (None: warm, or written by an older version)."""
    reserved: tuple[float, float, int] | None = None
    """What it reserves of its host: CPUs, MiB of memory, pids (``sandbox.capacity``); None: written by an older
    version (counted at its kind's request)."""

    @model_serializer(mode="wrap")
    def _without_unset_capacity(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Left out when None, so a replica of the previous version (whose record forbids unknown fields) reads it.
        data: dict[str, Any] = handler(self)
        for field in ("tenant", "reserved"):
            if data.get(field) is None:
                data.pop(field, None)
        return data

    def moved_to(
        self,
        state: InstanceState,
        *,
        sandbox: str | None = None,
        owner: str | None = None,
        tenant: str | None = None,
    ) -> InstanceRecord:
        update: dict[str, Any] = {"state": state, "since": time.time()}
        if sandbox is not None:
            update["sandbox"] = sandbox
        if tenant is not None:
            update["tenant"] = tenant
        if owner is not None:
            update["owner"] = owner
        return self.model_copy(update=update)


def kind_and_state(doc: dict[str, Any]) -> tuple[SandboxKind, SandboxState] | None:
    """A sandbox record's kind and state, read without validating the whole record (a scrape counts them all);
    None for a document that is not a sandbox record."""
    try:
        return SandboxKind(doc["spec"]["kind"]), SandboxState(doc["state"])
    except (KeyError, TypeError, ValueError):
        return None


def pool_key(spec: SandboxSpec, image: str) -> str:
    """Sandboxes whose specs share this key can use each other's warm instances."""
    return _pool_keys.get(spec, lambda: _pool_key(spec, image), extra=image)


def _pool_key(spec: SandboxSpec, image: str) -> str:
    fields = spec.model_dump(mode="json", exclude=_NOT_PROVISIONING)
    fields["image"] = image
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return f"pool:{spec.kind.value}:{digest[:16]}"


def snapshot_key(tenant: str, name: str) -> str:
    return f"{tenant}/{name}"


class SnapshotRecord(SnapshotInfo):
    """A snapshot and the spec of the sandbox it was taken from: what its warm instances start with,
    even after that sandbox is gone, on whichever control-plane replica leads."""

    spec: SandboxSpec | None = None
    task: bool = False
    """A task's post-setup state, taken by a reset to the task (``task_snapshots``): collected when unused."""
    last_used_at: float | None = None
    """When a reset to its task last swapped it in (roughly: see ``task_snapshots.TOUCH_EVERY_S``)."""

    def info(self) -> SnapshotInfo:
        return SnapshotInfo.model_validate(self.model_dump(exclude={"spec", "task", "last_used_at"}))

    def last_used(self) -> float:
        """When it was last used: swapped in by a reset, else taken."""
        return max(self.created_at, self.last_used_at or 0.0)

    def warm_spec(self) -> SandboxSpec | None:
        return None if self.spec is None else self.spec.model_copy(update={"snapshot": self.name})
