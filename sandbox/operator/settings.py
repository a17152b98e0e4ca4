"""The operator's settings (``"operator"`` in server.json). Pydantic only: read whatever the backend."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class OperatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        True, description="With the kubernetes backend: mirror sandboxes into Sandbox objects, apply SandboxPools."
    )
    interval_s: float = Field(1.0, gt=0, description="How often the leader compares the records with the objects.")
    write_concurrency: int = Field(16, ge=1, le=256, description="Writes to the API server at once.")
    watch_timeout_s: float = Field(300.0, gt=0, description="A watch is opened again after this long.")
    declared: bool = Field(
        True,
        description="Create a sandbox for each Sandbox object applied with kubectl (whoever may create Sandbox objects "
        "in the sandbox namespace then acts for any tenant, or for declared_tenants).",
    )
    default_tenant: str = Field(
        "default",
        min_length=1,
        description="The tenant of a declared Sandbox whose spec.tenant and sandbox.platform.io/tenant annotation are "
        "absent.",
    )
    declared_tenants: tuple[str, ...] | None = Field(
        None, description="The tenants a declared Sandbox may name; null: any. Another is refused (phase Failed)."
    )
    declared_retry_s: float = Field(
        10.0, gt=0, description="A declared Sandbox refused for want of capacity is tried again after this long."
    )
