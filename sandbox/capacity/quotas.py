"""Each tenant's limits, read from the tokens file beside its tokens:

    {"tokens": {"<token>": "team-a", "<token>": {"tenant": "ops", "admin": true}},
     "quotas": {"team-a": {"max_sandboxes": 200, "max_memory_mb": 65536}},
     "default_quota": {"max_sandboxes": 50, "max_group": 32}}

A tenant not named gets ``default_quota``; an admin gets no limits unless its tenant is named. Sandboxes, CPUs and
memory count what the tenant's sandboxes reserve (``CapacityModel.reservation``); warm counts the replicas its
snapshots keep; snapshots count its named snapshots (a task's snapshot is the platform's, not counted).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.capacity.usage import Usage
from sandbox.errors import InvalidArgument


class Quota(BaseModel):
    """Limits of one tenant; None: no limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_sandboxes: int | None = Field(None, ge=0, description="Sandboxes held at once.")
    max_cpus: float | None = Field(None, ge=0, description="CPU cores their sandboxes reserve together.")
    max_memory_mb: float | None = Field(None, ge=0, description="Memory their sandboxes reserve together, MiB.")
    max_warm: int | None = Field(None, ge=0, description="Warm replicas their snapshots keep together.")
    max_group: int | None = Field(None, ge=1, description="Sandboxes in one create_group call.")
    max_snapshots: int | None = Field(None, ge=0, description="Named snapshots kept.")

    def exceeded(self, sandboxes: int, reserved: Usage) -> list[str]:
        """What holding ``sandboxes`` reserving ``reserved`` in all would exceed, each said for people."""
        over = []
        if self.max_sandboxes is not None and sandboxes > self.max_sandboxes:
            over.append(f"sandboxes: {sandboxes:,} would be held, the quota is {self.max_sandboxes:,}")
        if self.max_cpus is not None and reserved.cpus > self.max_cpus + 1e-6:
            over.append(f"CPUs: {reserved.cpus:,.2f} would be reserved, the quota is {self.max_cpus:,.2f}")
        if self.max_memory_mb is not None and reserved.memory_mb > self.max_memory_mb + 1e-6:
            over.append(
                f"memory: {reserved.memory_mb:,.0f} MiB would be reserved, the quota is {self.max_memory_mb:,.0f} MiB"
            )
        return over


UNLIMITED = Quota()


class QuotaBook:
    def __init__(self, quotas: dict[str, Quota] | None = None, *, default: Quota = UNLIMITED) -> None:
        self._quotas = dict(quotas or {})
        self.default = default

    def for_tenant(self, tenant: str, *, admin: bool = False) -> Quota:
        found = self._quotas.get(tenant)
        if found is not None:
            return found
        return UNLIMITED if admin else self.default

    def named(self) -> dict[str, Quota]:
        return dict(self._quotas)

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> QuotaBook:
        """From a tokens file's ``quotas`` and ``default_quota`` (both optional)."""
        try:
            quotas = {str(t): Quota.model_validate(q) for t, q in dict(doc.get("quotas") or {}).items()}
            default = Quota.model_validate(doc.get("default_quota") or {})
        except (ValidationError, TypeError, ValueError) as e:
            raise InvalidArgument(f"the tokens file's quotas are not valid: {e}") from e
        return cls(quotas, default=default)
