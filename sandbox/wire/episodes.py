"""Proto messages <-> the models of episodes and trajectories (``sandbox.trajectories.models``), for the gRPC skin
and the SDK; the generic walk of :mod:`sandbox.wire.convert` does the mirrored fields, and the few shapes that
differ (an action as JSON text, an observation without its image) are handled here."""

from __future__ import annotations

import json

from sandbox import models
from sandbox.trajectories.models import FrameRef, MediaRef, Trajectory, TrajectoryInfo, TrajectoryStep
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb


def trajectory_info_to_proto(info: TrajectoryInfo) -> pb.TrajectoryInfo:
    message = pb.TrajectoryInfo()
    convert.fill(message, info.model_dump(exclude_none=True))
    return message


def trajectory_info_from_proto(message: pb.TrajectoryInfo) -> TrajectoryInfo:
    return TrajectoryInfo.model_validate(convert.to_dict(message))


def step_to_proto(step: TrajectoryStep) -> pb.TrajectoryStep:
    message = pb.TrajectoryStep(index=step.index, at=step.at)
    if step.action is not None:
        message.action = json.dumps(step.action)
    message.observation.CopyFrom(convert.observation_to_proto(step.observation))
    if step.frame is not None:
        convert.fill(message.frame, step.frame.model_dump())
    return message


def step_from_proto(message: pb.TrajectoryStep) -> TrajectoryStep:
    return TrajectoryStep(
        index=message.index,
        at=message.at,
        action=json.loads(message.action) if message.HasField("action") else None,
        observation=convert.observation_from_proto(message.observation),
        frame=FrameRef.model_validate(convert.to_dict(message.frame)) if message.HasField("frame") else None,
    )


def trajectory_to_proto(trajectory: Trajectory) -> pb.Trajectory:
    return pb.Trajectory(
        info=trajectory_info_to_proto(trajectory.info), steps=[step_to_proto(s) for s in trajectory.steps]
    )


def trajectory_from_proto(message: pb.Trajectory) -> Trajectory:
    return Trajectory(info=trajectory_info_from_proto(message.info), steps=[step_from_proto(s) for s in message.steps])


def media_ref_to_proto(ref: MediaRef) -> pb.MediaRef:
    message = pb.MediaRef()
    convert.fill(message, ref.model_dump(exclude_none=True))
    return message


def media_ref_from_proto(message: pb.MediaRef) -> MediaRef:
    return MediaRef.model_validate(convert.to_dict(message))


def screenshot_to_proto(shot: models.Screenshot) -> pb.Screenshot:
    message = pb.Screenshot()
    convert.fill(message, shot.model_dump())
    return message


def screenshot_from_proto(message: pb.Screenshot) -> models.Screenshot:
    return models.Screenshot.model_validate(convert.to_dict(message))
