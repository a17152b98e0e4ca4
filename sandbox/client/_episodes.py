"""The SDK's operations on episodes and trajectories (sans-I/O, as :mod:`sandbox.client._ops`): reset to a task,
evaluate, and the trajectory store's list, get, frame, media and delete."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from sandbox import models
from sandbox.client._ops import Call, Local, Op
from sandbox.errors import InvalidArgument
from sandbox.tasks.model import Task
from sandbox.trajectories.models import MEDIA_CHUNK_BYTES, Trajectory, TrajectoryInfo
from sandbox.wire import convert
from sandbox.wire import episodes as wire
from sandbox.wire.grpc_gen import sandbox_pb2 as pb

TaskLike: TypeAlias = Task | Mapping[str, Any] | str | os.PathLike[str]
"""A task: a :class:`~sandbox.tasks.model.Task`, its JSON object as a dict, or the path of its JSON file."""

MAX_SENT_FIXTURE_BYTES = 48 * 1024 * 1024
RESET_DEADLINE_S = 600.0
"""The least deadline of a reset to a task: the first one runs its setup (downloads, apps) and snapshots it."""


def _load(task: TaskLike) -> Task:
    if isinstance(task, Task):
        return task
    if isinstance(task, Mapping):
        return Task.from_dict(dict(task))
    return Task.from_file(Path(task))


def _fixtures(task: Task) -> dict[str, bytes]:
    """The bytes of the files the task downloads that its own fixtures have (those beside its file)."""
    sent: dict[str, bytes] = {}
    if task.fixtures is None:
        return sent
    for url in task.download_urls():
        data = task.fixtures.get(url)
        if data is not None:
            sent[url] = data
    if sum(len(v) for v in sent.values()) > MAX_SENT_FIXTURE_BYTES:
        raise InvalidArgument(
            f"task {task.id!r} downloads more than {MAX_SENT_FIXTURE_BYTES >> 20} MiB of fixtures: put them in the "
            "server's tasks.fixtures_dir instead"
        )
    return sent


def reset(
    sandbox_id: str, *, snapshot: str | None = None, task: TaskLike | None = None, record: bool = False
) -> Op[tuple[models.SandboxInfo, models.Observation | None]]:
    """Reset (to ``snapshot``, or to ``task``): the sandbox's info, and the episode's first observation for a task;
    ``record``: the episode's screen recorded into its trajectory (android)."""
    request = pb.ResetRequest(sandbox_id=sandbox_id, record=record)
    if snapshot is not None:
        request.snapshot = snapshot
    min_timeout = 0.0
    if task is not None:
        if snapshot is not None:
            raise InvalidArgument("reset to a task or to a snapshot, not both")
        loaded: Task = yield Local(functools.partial(_load, task))
        request.task_json = json.dumps(loaded.to_dict())
        for url, data in (yield Local(functools.partial(_fixtures, loaded))).items():
            request.fixtures[url] = data
        min_timeout = RESET_DEADLINE_S
    reply = yield Call("Reset", request, min_timeout=min_timeout)
    obs = convert.observation_from_proto(reply.observation) if reply.HasField("observation") else None
    return convert.info_from_proto(reply.sandbox), obs


def evaluate(sandbox_id: str) -> Op[float]:
    reply = yield Call("Evaluate", pb.EvaluateRequest(sandbox_id=sandbox_id), min_timeout=RESET_DEADLINE_S)
    return float(reply.reward)


def list_trajectories(*, task_id: str | None = None) -> Op[list[TrajectoryInfo]]:
    request = pb.ListTrajectoriesRequest()
    if task_id is not None:
        request.task_id = task_id
    reply = yield Call("ListTrajectories", request)
    return [wire.trajectory_info_from_proto(t) for t in reply.trajectories]


def get_trajectory(trajectory_id: str) -> Op[Trajectory]:
    reply = yield Call("GetTrajectory", pb.GetTrajectoryRequest(trajectory_id=trajectory_id))
    return wire.trajectory_from_proto(reply)


def trajectory_frame(trajectory_id: str, sha256: str) -> Op[models.Screenshot]:
    reply = yield Call("GetTrajectoryFrame", pb.GetTrajectoryFrameRequest(trajectory_id=trajectory_id, sha256=sha256))
    return wire.screenshot_from_proto(reply)


def trajectory_media(trajectory_id: str, sha256: str) -> Op[bytes]:
    """A medium's bytes (a screen recording), a piece per call."""
    pieces: list[bytes] = []
    offset = 0
    while True:
        request = pb.GetTrajectoryMediaRequest(
            trajectory_id=trajectory_id, sha256=sha256, offset=offset, length=MEDIA_CHUNK_BYTES
        )
        reply = yield Call("GetTrajectoryMedia", request)
        pieces.append(reply.data)
        offset += len(reply.data)
        if offset >= reply.media.size or not reply.data:
            return b"".join(pieces)


def delete_trajectory(trajectory_id: str) -> Op[None]:
    yield Call("DeleteTrajectory", pb.DeleteTrajectoryRequest(trajectory_id=trajectory_id))
