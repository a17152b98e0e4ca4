"""Trajectories: every step of every episode (action, timings, observation, frames, reward, screen recordings), for
the data flywheel.

The service records them through a :class:`TrajectoryStore`; :class:`LocalTrajectoryStore` (a directory) is the
default. :class:`TrajectorySettings` is the ``trajectories`` section of the server settings.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from sandbox import environment
from sandbox.trajectories.base import TrajectoryStore
from sandbox.trajectories.local import LocalTrajectoryStore, frame_hash
from sandbox.trajectories.models import MAX_MEDIA_BYTES, FrameRef, MediaRef, Trajectory, TrajectoryInfo, TrajectoryStep


class TrajectorySettings(BaseModel):
    """Where trajectories are kept."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Record the steps of episodes.")
    dir: str | None = Field(
        None,
        description="Directory of the local trajectory store; by default `trajectories/` beside the embedded store's "
        "state file, else $XDG_DATA_HOME (~/.local/share)/sandbox/trajectories.",
    )

    def directory(self, state_path: str | None) -> str:
        if self.dir:
            return os.path.expanduser(self.dir)
        if state_path:
            return os.path.join(os.path.dirname(os.path.abspath(os.path.expanduser(state_path))), "trajectories")
        data_home = environment.data_home()
        return os.path.join(data_home, "sandbox", "trajectories")

    def open(self, state_path: str | None) -> TrajectoryStore | None:
        return LocalTrajectoryStore(self.directory(state_path)) if self.enabled else None


__all__ = [
    "MAX_MEDIA_BYTES",
    "FrameRef",
    "LocalTrajectoryStore",
    "MediaRef",
    "Trajectory",
    "TrajectoryInfo",
    "TrajectorySettings",
    "TrajectoryStep",
    "TrajectoryStore",
    "frame_hash",
]
