"""The ``/v1/trajectories`` routes of the REST skin: the recorded episodes, their steps, frames and media."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from sandbox.api.contract import error_responses
from sandbox.api.rest.bodies import TrajectoryList
from sandbox.api.rest.context import Caller, Service
from sandbox.api.rest.errors import GuardedRoute
from sandbox.trajectories.models import Trajectory

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")
TrajectoryId = Annotated[str, Path(pattern=r"^tr-[0-9a-f]{16}$", description="A trajectory id: tr-<16 hex digits>.")]


def router(prefix: str) -> APIRouter:
    router = APIRouter(
        prefix=prefix,
        route_class=GuardedRoute,
        tags=["trajectories"],
        responses=error_responses(
            401,
            404,
            409,
            422,
            "5XX",
            d404="No such trajectory (or not yours), or no such frame or medium.",
            d409="This control plane records no trajectories.",
        ),
    )

    @router.get("/trajectories")
    async def list_trajectories(
        caller: Caller,
        service: Service,
        task_id: Annotated[str | None, Query(max_length=256, description="Only this task's.")] = None,
    ) -> TrajectoryList:
        """Your recorded episodes (every tenant's for an admin), oldest first."""
        return TrajectoryList(trajectories=await service.list_trajectories(caller, task_id=task_id))

    @router.get("/trajectories/{trajectory_id}")
    async def get_trajectory(trajectory_id: TrajectoryId, caller: Caller, service: Service) -> Trajectory:
        """A trajectory's summary and its steps; each step names its screenshot by hash (``frame.sha256``)."""
        return await service.get_trajectory(caller, trajectory_id)

    @router.get(
        "/trajectories/{trajectory_id}/frames/{sha256}",
        response_class=Response,
        responses={200: {"content": {"image/png": {}, "image/jpeg": {}}, "description": "The frame's image."}},
    )
    async def trajectory_frame(
        trajectory_id: TrajectoryId,
        sha256: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")],
        caller: Caller,
        service: Service,
    ) -> Response:
        shot = await service.trajectory_frame(caller, trajectory_id, sha256)
        return Response(
            shot.data,
            media_type=f"image/{shot.format}",
            headers={
                "X-Screen-Width": str(shot.width),
                "X-Screen-Height": str(shot.height),
                "Cache-Control": "private, max-age=31536000, immutable",  # named by its content
            },
        )

    @router.get(
        "/trajectories/{trajectory_id}/media/{sha256}",
        response_class=Response,
        responses={200: {"content": {"video/mp4": {}}, "description": "The medium's bytes (a screen recording)."}},
    )
    async def trajectory_media(
        trajectory_id: TrajectoryId,
        sha256: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$")],
        caller: Caller,
        service: Service,
    ) -> Response:
        """A medium kept with a trajectory (a screen recording), by the hash its summary names (``media[].sha256``);
        its content type is the ref's."""
        ref, data = await service.trajectory_media(caller, trajectory_id, sha256)
        return Response(
            data,
            media_type=ref.content_type,
            headers={
                "Content-Disposition": f'attachment; filename="{_SAFE_NAME.sub("_", ref.name)}"',
                "Cache-Control": "private, max-age=31536000, immutable",  # named by its content
            },
        )

    @router.delete("/trajectories/{trajectory_id}", status_code=204, response_class=Response)
    async def delete_trajectory(trajectory_id: TrajectoryId, caller: Caller, service: Service) -> Response:
        await service.delete_trajectory(caller, trajectory_id)
        return Response(status_code=204)

    return router
