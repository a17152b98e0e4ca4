"""What a trajectory is on the wire and on disk: its summary (``TrajectoryInfo``), its steps and their frames.

Shared by the service (which records them), the API skins and the SDK (which read them), so this module needs
nothing but pydantic and :mod:`sandbox.models`. The proto mirrors these models field for field
(``tests/unit/test_episodes_wire.py`` keeps them so).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from sandbox.models import Model, Observation, SandboxKind

TRAJECTORY_ID = re.compile(r"^tr-[0-9a-f]{16}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


class FrameRef(Model):
    """A screenshot kept with a trajectory, once per distinct content: fetch it by its hash."""

    sha256: str = Field(description="SHA-256 of the encoded image: the frame's name in its trajectory.")
    format: Literal["png", "jpeg"]
    width: int
    height: int


class TrajectoryStep(Model):
    """One step of an episode. Index 0 is the reset that started it (no action), then one per action."""

    index: int = Field(ge=0)
    at: float = Field(description="Unix seconds when the step's observation was made.")
    action: dict[str, Any] | None = Field(None, description="The action as JSON; None for the reset.")
    observation: Observation = Field(description="What the caller got, without the screenshot's bytes.")
    frame: FrameRef | None = Field(None, description="The screenshot the caller got, if any.")


class TrajectoryInfo(Model):
    """A trajectory's summary: whose, of which sandbox, instance and image, of which task, and how it ended."""

    id: str
    tenant: str
    sandbox_id: str
    kind: SandboxKind
    instance: str = Field(description="The instance the episode started on.")
    image: str = Field(description="The image (or snapshot image) that instance runs.")
    task_id: str | None = None
    task_digest: str | None = None
    started_at: float
    ended_at: float | None = None
    reward: float | None = Field(None, description="The last evaluation's reward, in [0, 1].")
    steps: int = Field(0, description="Actions taken (the reset not counted).")
    done: bool = False
    truncated: bool = Field(False, description="Ended by the step or time limit, not by the agent.")
    reason: str | None = Field(None, description="Why it ended: done, fail, step_limit, time_limit, reset.")
    frames: int = Field(0, description="Distinct screenshots kept.")


class Trajectory(Model):
    info: TrajectoryInfo
    steps: list[TrajectoryStep]
