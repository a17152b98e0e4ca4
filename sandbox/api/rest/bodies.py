"""The request and response bodies of the REST skin only (the rest are the models of ``sandbox.models``; the error
body is :mod:`sandbox.api.contract`'s)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, StrictBool

from sandbox.api.contract import ErrorDetail
from sandbox.capacity.report import WaitingCall
from sandbox.models import GROUP_MAX, Action, FileInfo, Model, Observation, SandboxInfo, SandboxSpec, SnapshotInfo
from sandbox.models.step_batch import STEP_BATCH_MAX
from sandbox.service.snapshots import MAX_WARM, SNAPSHOT_NAME
from sandbox.trajectories.models import TrajectoryInfo


class StepRequest(Model):
    action: Action
    screenshot: StrictBool = False


class BatchStep(Model):
    sandbox_id: str = Field(min_length=1)
    action: Action
    screenshot: StrictBool = False


class StepBatch(Model):
    steps: list[BatchStep] = Field(
        max_length=STEP_BATCH_MAX, description="One step a sandbox, all done at once; at most 1024."
    )


class StepOutcome(Model):
    """One step's answer: its observation, or its error (as a failed call's body says it)."""

    observation: Observation | None = None
    error: ErrorDetail | None = None


class StepOutcomes(Model):
    results: list[StepOutcome] = Field(description="One a step, in the order of the steps.")


class SandboxList(Model):
    sandboxes: list[SandboxInfo]
    waiting: list[WaitingCall] = Field(
        default_factory=list, description="Your calls queued for capacity, in serving order (the list only)."
    )


WAIT_S = Field(
    0.0,
    ge=0,
    le=86_400,
    description="Queue this long for capacity when the host or your quota is full (0: refuse at once with 429). "
    "At most the server's capacity.max_wait_s.",
)


class GroupRequest(Model):
    spec: SandboxSpec
    count: int = Field(ge=1, le=GROUP_MAX, description="How many sandboxes of the spec (a rollout group).")
    wait_s: float = WAIT_S


class ResetRequest(Model):
    # fixtures travel as URL-safe base64 (RFC 4648 section 5), as screenshots do
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    snapshot: str | None = Field(
        None, description="Reset to this snapshot of yours (kept as the sandbox's start from then on)."
    )
    task: dict[str, Any] | None = Field(
        None,
        description="A task (OSWorld's task JSON) to start an episode of: the reply is then the sandbox and the "
        "episode's first observation. Not with snapshot.",
    )
    fixtures: dict[str, bytes] = Field(
        default_factory=dict,
        description="Files the task downloads, URL -> base64 bytes, on top of the server's fixtures (48 MiB in all).",
    )
    record: StrictBool = Field(
        False,
        description="With a task: record the episode's screen into its trajectory (info.media: an MP4 per 180 s "
        "segment at most, fetched at /v1/trajectories/{id}/media/{sha256}). Android sandboxes only (409 elsewhere).",
    )


class EpisodeStart(Model):
    """The reply of a reset to a task."""

    sandbox: SandboxInfo
    observation: Observation = Field(
        description="The episode's first observation; info: {steps, truncated, reason, task_id, trajectory_id, "
        "setup_ran, setup_steps, snapshot} and, with record, recording (whether the screen recording started)."
    )


class Reward(Model):
    reward: float = Field(ge=0, le=1)


class TrajectoryList(Model):
    trajectories: list[TrajectoryInfo]


class SnapshotRequest(Model):
    name: str = Field(
        pattern=SNAPSHOT_NAME.pattern, description="1-63 of [a-z0-9_.-], starting with a letter or digit."
    )
    warm: int = Field(
        0, ge=0, le=MAX_WARM, description="Replicas to keep running so a reset to the snapshot takes no start."
    )


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
