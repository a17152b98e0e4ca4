"""A direct lane (docs/lanes.md): where an SDK steps one sandbox without the control plane in the path."""

from __future__ import annotations

from pydantic import Field

from sandbox.models.base import Model


class LaneInfo(Model):
    sandbox_id: str
    address: str = Field(description="unix:PATH (a Docker host's lane socket) or tcp:HOST:PORT (a pod's agent)")
    ticket: str = Field(repr=False, description="what the lane's hello presents; a secret, never logged")
    expires_at: float = Field(description="Unix time after which the lane does nothing: open a new one")
    actions: list[str] = Field(description="the action types the lane carries; any other goes to the control plane")
