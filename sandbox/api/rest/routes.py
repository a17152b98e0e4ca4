"""The ``/v1`` routes of the REST skin: each translates its request, calls the service, and returns a body."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import PlainTextResponse

from sandbox.api.contract import ErrorBody, SandboxId, SnapshotName, error_responses
from sandbox.api.rest.bodies import (
    ActionList,
    EpisodeStart,
    FileList,
    FileWritten,
    GroupRequest,
    ResetRequest,
    Reward,
    SandboxList,
    SnapshotList,
    SnapshotRequest,
    StepBatch,
    StepOutcome,
    StepOutcomes,
    StepRequest,
)
from sandbox.api.rest.context import Caller, Service
from sandbox.api.rest.errors import GuardedRoute, step_error
from sandbox.capacity.report import CapacityReport
from sandbox.errors import InvalidArgument, SandboxError
from sandbox.models import (
    Exec,
    ExecResult,
    Health,
    LaneInfo,
    Observation,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)
from sandbox.protocol import MAX_READ_BYTES
from sandbox.service.step_batches import StepOrder
from sandbox.service.trajectory_ops import RECORD_NEEDS_A_TASK
from sandbox.wire.convert import Renewal

API_PREFIX = "/v1"
MAX_OFFSET = 1 << 62
MAX_LOG_TAIL = 100_000
MAX_PATH_CHARS = 4096
_OCTAL_MODE = r"^(0o|0)?[0-7]{1,4}$"

FilePath = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="Path inside the sandbox; a relative path is taken from the sandbox's workspace.",
    ),
]
WaitSeconds = Annotated[
    float,
    Query(
        ge=0,
        le=86_400,
        description="Queue this long for capacity when the host or your quota is full (0: refuse at once with 429).",
    ),
]
ImageFormat = Annotated[
    Literal["png", "jpeg", "zstd"],
    Query(description="Image encoding; zstd: the screen's BGRX pixels, Zstandard-compressed (sandbox.models.images)."),
]
Quality = Annotated[int, Query(ge=1, le=100, description="JPEG quality (ignored for png).")]
WITH_BODY = error_responses(400, 413)
"""A route that takes a JSON body: it may be unreadable, or too large."""
FILES = error_responses(403, 413, d404="No such sandbox (or not yours), or no such file.")


def router() -> APIRouter:
    """The ``/v1`` routes."""
    router = APIRouter(
        prefix=API_PREFIX,
        route_class=GuardedRoute,
        responses=error_responses(401, 404, 409, 422, "5XX"),
    )

    # ------------------------------------------------------------------ lifecycle

    @router.post(
        "/sandboxes",
        status_code=201,
        responses={
            **WITH_BODY,
            **error_responses(
                404,
                409,
                429,
                d404="No such snapshot of yours, or no such image.",
                d409="The backend cannot run this kind, or the host has fewer CPUs than resources.cpus asks.",
            ),
        },
        tags=["sandboxes"],
    )
    async def create_sandbox(
        spec: SandboxSpec, caller: Caller, service: Service, wait_s: WaitSeconds = 0.0
    ) -> SandboxInfo:
        """A new sandbox of yours, running and healthy; admitted first (429 when there is no room now)."""
        return await service.create(caller, spec, wait_s=wait_s)

    @router.post(
        "/sandboxes:group",
        status_code=201,
        responses={
            **WITH_BODY,
            **error_responses(404, 409, 429, d404="No such snapshot of yours, or no such image."),
        },
        tags=["sandboxes"],
    )
    async def create_sandbox_group(body: GroupRequest, caller: Caller, service: Service) -> SandboxList:
        """``count`` new sandboxes of one spec, made at once: all of them, running and healthy, or none (when one
        cannot be made, the others are deleted and its error is the answer). The whole group is admitted before
        any starts (429 when it does not fit now)."""
        made = await service.create_group(caller, body.spec, body.count, wait_s=body.wait_s)
        return SandboxList(sandboxes=made)

    @router.get("/sandboxes", tags=["sandboxes"])
    async def list_sandboxes(caller: Caller, service: Service) -> SandboxList:
        return SandboxList(sandboxes=await service.list_sandboxes(caller), waiting=service.waiting(caller))

    @router.get("/capacity", tags=["inspection"])
    async def capacity(caller: Caller, service: Service) -> CapacityReport:
        """The host's capacity, what is reserved and what is free, the calls waiting for it, and your tenant's use
        and quota (every tenant's to an admin)."""
        return service.capacity(caller)

    @router.get("/sandboxes/{sandbox_id}", tags=["sandboxes"])
    async def get_sandbox(sandbox_id: SandboxId, caller: Caller, service: Service) -> SandboxInfo:
        return await service.get(caller, sandbox_id)

    @router.delete("/sandboxes/{sandbox_id}", status_code=204, response_class=Response, tags=["sandboxes"])
    async def delete_sandbox(sandbox_id: SandboxId, caller: Caller, service: Service) -> Response:
        await service.delete(caller, sandbox_id)
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/reset", responses={**WITH_BODY, **error_responses(429)}, tags=["sandboxes"])
    async def reset_sandbox(
        sandbox_id: SandboxId, caller: Caller, service: Service, body: Annotated[ResetRequest | None, Body()] = None
    ) -> SandboxInfo | EpisodeStart:
        """Back to the initial state; the body (optional) names a snapshot to reset to instead, or a task to start an
        episode of (the reply is then the sandbox and the episode's first observation)."""
        snapshot = body.snapshot if body is not None else None
        if body is not None and body.task is not None:
            if snapshot is not None:
                raise InvalidArgument("reset to a task or to a snapshot, not both")
            task = service.load_task(body.task, fixtures=body.fixtures)
            info, obs = await service.reset_to_task(caller, sandbox_id, task, record_screen=body.record)
            return EpisodeStart(sandbox=info, observation=obs)
        if body is not None and body.record:
            raise InvalidArgument(RECORD_NEEDS_A_TASK)
        return await service.reset(caller, sandbox_id, snapshot=snapshot)

    @router.post(
        "/sandboxes/{sandbox_id}/evaluate",
        responses={409: {"model": ErrorBody, "description": "The sandbox runs no episode: reset it to a task."}},
        tags=["episodes"],
    )
    async def evaluate(sandbox_id: SandboxId, caller: Caller, service: Service) -> Reward:
        """Score the sandbox's episode with its task's evaluator: the reward in [0, 1]."""
        return Reward(reward=await service.evaluate(caller, sandbox_id))

    @router.post(
        "/sandboxes/{sandbox_id}/renew",
        responses={**WITH_BODY, 409: {"model": ErrorBody, "description": "The sandbox's lease has already ended."}},
        tags=["sandboxes"],
    )
    async def renew_sandbox(
        sandbox_id: SandboxId, caller: Caller, service: Service, body: Annotated[Renewal | None, Body()] = None
    ) -> SandboxInfo:
        """Extend the lease: the sandbox now expires ``ttl_s`` (default: its spec's) from now."""
        ttl_s = body.ttl_s if body is not None else None
        return await service.renew(caller, sandbox_id, ttl_s=ttl_s)

    # ------------------------------------------------------------------ snapshots

    @router.post(
        "/sandboxes/{sandbox_id}/snapshots",
        status_code=201,
        responses={
            **WITH_BODY,
            409: {"model": ErrorBody, "description": "The sandbox or its backend cannot be snapshotted."},
            **error_responses(429, d429="Its warm replicas exceed the warm share, or the tenant's quota."),
        },
        tags=["snapshots"],
    )
    async def create_snapshot(
        sandbox_id: SandboxId, body: SnapshotRequest, caller: Caller, service: Service
    ) -> SnapshotInfo:
        """Keep the sandbox's file system (and a desktop's GUI apps) as a snapshot of yours."""
        return await service.snapshot(caller, sandbox_id, body.name, warm=body.warm)

    @router.get("/snapshots", tags=["snapshots"])
    async def list_snapshots(caller: Caller, service: Service) -> SnapshotList:
        return SnapshotList(snapshots=await service.list_snapshots(caller))

    @router.delete("/snapshots/{name}", status_code=204, response_class=Response, tags=["snapshots"])
    async def delete_snapshot(name: SnapshotName, caller: Caller, service: Service) -> Response:
        await service.delete_snapshot(caller, name)
        return Response(status_code=204)

    # ------------------------------------------------------------------ acting

    @router.post("/sandboxes:step", responses=WITH_BODY, tags=["acting"])
    async def step_many(body: StepBatch, request: Request, caller: Caller, service: Service) -> StepOutcomes:
        """A step in each of many sandboxes, all at once (a vectorized environment's step). Each step is answered,
        in order, by its observation or its error: one sandbox failing fails no other. One step a sandbox."""
        outcomes = await service.step_many(
            caller, [StepOrder(s.sandbox_id, s.action, s.screenshot) for s in body.steps]
        )
        return StepOutcomes(
            results=[
                StepOutcome(error=step_error(request, o)) if isinstance(o, SandboxError) else StepOutcome(observation=o)
                for o in outcomes
            ]
        )

    @router.post("/sandboxes/{sandbox_id}/step", responses=WITH_BODY, tags=["acting"])
    async def step(sandbox_id: SandboxId, body: StepRequest, caller: Caller, service: Service) -> Observation:
        return await service.step(caller, sandbox_id, body.action, screenshot=body.screenshot)

    @router.get("/sandboxes/{sandbox_id}/observe", tags=["acting"])
    async def observe(
        sandbox_id: SandboxId, caller: Caller, service: Service, format: ImageFormat = "png", quality: Quality = 80
    ) -> Observation:
        return await service.observe(caller, sandbox_id, format=format, quality=quality)

    @router.get(
        "/sandboxes/{sandbox_id}/screenshot",
        response_class=Response,
        responses={
            200: {
                "content": {"image/png": {}, "image/jpeg": {}, "application/zstd": {}},
                "description": "The raw image (zstd: the screen's pixels, sized by the X-Screen headers).",
            }
        },
        tags=["acting"],
    )
    async def screenshot(
        sandbox_id: SandboxId, caller: Caller, service: Service, format: ImageFormat = "png", quality: Quality = 80
    ) -> Response:
        shot = await service.screenshot(caller, sandbox_id, format=format, quality=quality)
        return Response(
            shot.data,
            media_type="application/zstd" if shot.format == "zstd" else f"image/{shot.format}",
            headers={"X-Screen-Width": str(shot.width), "X-Screen-Height": str(shot.height)},
        )

    @router.post("/sandboxes/{sandbox_id}/lane", tags=["acting"])
    async def open_lane(sandbox_id: SandboxId, caller: Caller, service: Service) -> LaneInfo:
        """A direct lane (docs/lanes.md): where and with what ticket the SDK steps the sandbox through its agent.
        409 while an episode runs, or where the backend offers no lane."""
        return await service.open_lane(caller, sandbox_id)

    @router.post("/sandboxes/{sandbox_id}/exec", responses=WITH_BODY, tags=["acting"])
    async def exec_command(sandbox_id: SandboxId, request: Exec, caller: Caller, service: Service) -> ExecResult:
        return await service.exec(caller, sandbox_id, request)

    # ------------------------------------------------------------------ files

    @router.get("/sandboxes/{sandbox_id}/files", responses=FILES, tags=["files"])
    async def list_files(sandbox_id: SandboxId, path: FilePath, caller: Caller, service: Service) -> FileList:
        return FileList(entries=await service.list_files(caller, sandbox_id, path))

    @router.get(
        "/sandboxes/{sandbox_id}/files/content",
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes."}, **FILES},
        tags=["files"],
    )
    async def read_file(
        sandbox_id: SandboxId,
        path: FilePath,
        caller: Caller,
        service: Service,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        length: Annotated[
            int | None,
            Query(ge=0, le=MAX_READ_BYTES, description="Bytes to read (128 MiB at most); to the end if unset."),
        ] = None,
    ) -> Response:
        data = await service.read_file(caller, sandbox_id, path, offset=offset, length=length)
        return Response(data, media_type="application/octet-stream")

    @router.put(
        "/sandboxes/{sandbox_id}/files/content",
        responses=FILES,
        openapi_extra={
            "requestBody": {
                "required": False,
                "description": "The bytes to write (none: an empty file, or nothing appended).",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        tags=["files"],
    )
    async def write_file(
        sandbox_id: SandboxId,
        path: FilePath,
        request: Request,
        caller: Caller,
        service: Service,
        mode: Annotated[
            str, Query(pattern=_OCTAL_MODE, description="Permissions in octal, e.g. 644 or 0o755.")
        ] = "644",
        append: bool = False,
    ) -> FileWritten:
        data = await request.body()
        permissions = int(mode.removeprefix("0o"), 8)
        size = await service.write_file(caller, sandbox_id, path, data, mode=permissions, append=append)
        return FileWritten(path=path, size=size)

    @router.delete(
        "/sandboxes/{sandbox_id}/files", status_code=204, response_class=Response, responses=FILES, tags=["files"]
    )
    async def delete_file(
        sandbox_id: SandboxId, path: FilePath, caller: Caller, service: Service, recursive: bool = False
    ) -> Response:
        await service.delete_file(caller, sandbox_id, path, recursive=recursive)
        return Response(status_code=204)

    # ------------------------------------------------------------------ inspection

    @router.get("/sandboxes/{sandbox_id}/health", tags=["inspection"])
    async def health(sandbox_id: SandboxId, caller: Caller, service: Service) -> Health:
        return await service.health(caller, sandbox_id)

    @router.get(
        "/sandboxes/{sandbox_id}/logs",
        response_class=Response,  # not PlainTextResponse: that would document the errors as text/plain too
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "The log tail."}},
        tags=["inspection"],
    )
    async def logs(
        sandbox_id: SandboxId,
        caller: Caller,
        service: Service,
        tail: Annotated[int, Query(ge=0, le=MAX_LOG_TAIL)] = 200,
    ) -> PlainTextResponse:
        return PlainTextResponse(await service.logs(caller, sandbox_id, tail=tail))

    @router.get("/sandboxes/{sandbox_id}/actions", tags=["inspection"])
    async def recent_actions(sandbox_id: SandboxId, caller: Caller, service: Service) -> ActionList:
        return ActionList(actions=await service.recent_actions(caller, sandbox_id))

    return router
