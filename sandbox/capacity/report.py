"""What the API shows of capacity: the host's room, what is reserved, who waits, each tenant's use and quota.
Models only (pydantic and the platform's models): the SDK imports this module and nothing else of the package."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Report):
    cpus: float = 0.0
    memory_mb: float = 0.0
    pids: int = 0


class WaitingCall(_Report):
    """A create or a group waiting for capacity (it passed ``wait_s``)."""

    ticket: int
    tenant: str
    kind: str
    count: int = Field(description="Sandboxes it asks for.")
    position: int = Field(description="1: served next, as soon as it fits.")
    waited_s: float
    gives_up_in_s: float


class TenantUse(_Report):
    tenant: str
    sandboxes: int
    reserved: Resources
    quota: dict[str, int | float | None] = Field(description="The tenant's quota; null: no limit.")


class CapacityReport(_Report):
    bounded: bool = Field(description="Whether the host's size is known and checked (not on Kubernetes).")
    allocatable: Resources | None = None
    held: Resources = Resources()
    warm: Resources = Resources()
    granted: Resources = Field(Resources(), description="Admitted and not yet started.")
    free: Resources | None = Field(None, description="What new held sandboxes may still reserve (warm is evicted).")
    fits_now: dict[str, int] = Field(
        default_factory=dict, description="Sandboxes of each kind's default spec that fit now."
    )
    fits_empty: dict[str, int] = Field(default_factory=dict, description="... on an empty host: the model's limit.")
    under_pressure: str | None = Field(None, description="Why admission is stopped now, if it is.")
    waiting: list[WaitingCall] = Field(default_factory=list)
    tenants: list[TenantUse] = Field(default_factory=list)
