"""Replay a recorded trajectory: its actions applied, in order, to a fresh reset of its task; the reward it gets.

A trajectory names its task by id and by digest (of the task's sandbox, setup and the fixtures it downloads), not
by content: the task comes from a file (``task``) or is found by id among a folder's task files (``tasks_dir``,
e.g. the sample tasks in ``tasks/``). A task whose digest differs from the recorded one is replayed all the same,
with a warning (its setup changed since the recording).

Client-side: it runs through the SDK against any control plane that can see the trajectory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.errors import FailedPrecondition, NotFound
from sandbox.tasks.errors import TaskError
from sandbox.tasks.model import Task
from sandbox.trajectories.models import Trajectory


@dataclass
class ReplayResult:
    trajectory_id: str
    task_id: str
    original_reward: float | None
    reward: float
    steps: int
    """Actions applied (the original's, up to the episode's end)."""
    trajectory: str | None
    """The replay's own trajectory id."""
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def reproduced(self) -> bool:
        return self.original_reward is not None and abs(self.reward - self.original_reward) < 1e-9


def find_task(task_id: str, tasks_dir: str | Path) -> Task:
    """The task of id ``task_id`` among the ``*.json`` task files of ``tasks_dir`` (recursively)."""
    folder = Path(tasks_dir)
    if not folder.is_dir():
        raise NotFound(f"no task folder {folder}")
    for path in sorted(folder.rglob("*.json")):
        if path.name == "fixtures.json" or path.name.endswith(".solution.json"):
            continue
        try:
            task = Task.from_file(path)
        except TaskError:
            continue
        if task.id == task_id:
            return task
    raise NotFound(f"no task {task_id!r} in {folder}: give its file with --task")


def actions_of(trajectory: Trajectory) -> list[tuple[dict[str, Any], bool]]:
    """The trajectory's actions in order, each with whether its step brought a screenshot."""
    steps = sorted((s for s in trajectory.steps if s.index > 0 and s.action is not None), key=lambda s: s.index)
    return [(dict(s.action or {}), s.frame is not None) for s in steps]


def replay(
    client: Any,
    trajectory: Trajectory,
    task: Task,
    *,
    keep: bool = False,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> ReplayResult:
    """Replay ``trajectory`` through ``client`` (a :class:`sandbox.client.Client`) in a new sandbox of the task's
    kind, deleted at the end unless ``keep``."""
    info = trajectory.info
    warnings = []
    if info.task_id is None:
        raise FailedPrecondition(f"trajectory {info.id} is of no task: there is no reward to reproduce")
    if task.id != info.task_id:
        raise FailedPrecondition(f"trajectory {info.id} is of task {info.task_id!r}, not {task.id!r}")
    if info.task_digest is not None and task.digest() != info.task_digest:
        warnings.append(f"task {task.id!r} changed since the recording (its digest differs): replaying it as it is")
    spec: dict[str, Any] = {"labels": {"sandbox.task": task.id[:63], "sandbox.replay": info.id}}
    if task.sandbox.image is not None:
        spec["image"] = task.sandbox.image
    if task.sandbox.screen is not None:
        spec["screen"] = task.sandbox.screen.model_dump()
    started = time.monotonic()
    sandbox = client.create(task.sandbox.kind.value, **spec)
    try:
        obs = sandbox.reset(task=task)
        done = 0
        for action, screenshot in actions_of(trajectory):
            obs = sandbox.step(action, screenshot=screenshot)
            done += 1
            if on_step is not None:
                on_step(done, action)
            if obs.done:
                break
        reward = sandbox.evaluate()
    finally:
        if not keep:
            sandbox.close()
    return ReplayResult(
        trajectory_id=info.id,
        task_id=task.id,
        original_reward=info.reward,
        reward=reward,
        steps=done,
        trajectory=obs.info.get("trajectory_id"),
        seconds=time.monotonic() - started,
        warnings=warnings,
    )
