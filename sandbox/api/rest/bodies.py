"""The request and response bodies of the REST skin only (the rest are the models of ``sandbox.models``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sandbox.models import Action, FileInfo, Model, SandboxInfo, SnapshotInfo


class StepRequest(Model):
    action: Action
    screenshot: bool = False


class ErrorDetail(Model):
    code: str
    message: str


class ErrorBody(Model):
    error: ErrorDetail


class SandboxList(Model):
    sandboxes: list[SandboxInfo]


class ResetRequest(Model):
    snapshot: str | None = Field(
        None, description="Reset to this snapshot of yours (kept as the sandbox's start from then on)."
    )


class SnapshotRequest(Model):
    name: str = Field(description="1-63 of [a-z0-9_.-], starting with a letter or digit.")
    warm: int = Field(0, description="Replicas to keep running (0-32) so a reset to the snapshot takes no start.")


class SnapshotList(Model):
    snapshots: list[SnapshotInfo]


class FileList(Model):
    entries: list[FileInfo]


class FileWritten(Model):
    path: str
    size: int


class ActionList(Model):
    actions: list[dict[str, Any]]


class Ok(Model):
    ok: bool = True


class Readiness(Model):
    ready: bool
    checks: dict[str, str] = Field(description='Each check ("store", "backend"): "ok", or why it failed.')
