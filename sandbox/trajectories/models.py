"""What a trajectory is on the wire and on disk: its summary (``TrajectoryInfo``), its steps and their frames, and
the media kept with it (``MediaRef``: an android episode's screen recording).

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
MAX_MEDIA_BYTES = 256 * 1024 * 1024
"""The largest medium a trajectory keeps (a screen recording); a larger one is refused, with a warning kept."""
MEDIA_CHUNK_BYTES = 16 * 1024 * 1024
"""The most of a medium one gRPC call carries (``GetTrajectoryMedia``; gRPC messages are 64 MiB at most)."""
MEDIA_TYPE = re.compile(r"^[a-z]+/[a-z0-9][a-z0-9.+-]{0,62}$")


class FrameRef(Model):
    """A screenshot kept with a trajectory, once per distinct content: fetch it by its hash."""

    sha256: str = Field(description="SHA-256 of the encoded image: the frame's name in its trajectory.")
    format: Literal["png", "jpeg"]
    width: int
    height: int


class MediaRef(Model):
    """A medium kept with a trajectory (a screen recording of the episode), named by the SHA-256 of its bytes."""

    sha256: str = Field(description="SHA-256 of the bytes: the medium's name in its trajectory.")
    content_type: str = Field(description='Its media type, e.g. "video/mp4".')
    size: int = Field(ge=0, le=MAX_MEDIA_BYTES, description="Bytes.")
    name: str = Field(description='A file name for it, e.g. "screen-0000.mp4" (seconds into the episode).')
    started_at: float = Field(description="Unix seconds: what it shows starts then.")
    ended_at: float | None = Field(None, description="Unix seconds: what it shows ends then.")


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
    media: list[MediaRef] = Field(
        default_factory=list, description="Media kept with it (screen recordings, in order), fetched by hash."
    )
    warnings: list[str] = Field(
        default_factory=list, description="What went wrong while recording it, the episode went on (a recording lost)."
    )


class Trajectory(Model):
    info: TrajectoryInfo
    steps: list[TrajectoryStep]
