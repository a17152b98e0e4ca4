"""The gRPC skin over the service layer (``grpc.aio``, in the control plane's event loop).

It translates and holds no logic: proto → models with :mod:`sandbox.wire.convert`, a call to
:class:`~sandbox.service.SandboxService` on behalf of the caller's principal, models → proto,
and the platform's exceptions → status codes with :func:`sandbox.wire.status.grpc_status`.

- Authentication: metadata ``authorization: Bearer <token>`` → ``TokenRegistry.authenticate``.
- A request the models reject is ``INVALID_ARGUMENT`` with the bad field named (the converters
  in :mod:`sandbox.wire.convert` turn the ``ValidationError`` into ``InvalidArgument``).
- Anything else unexpected is ``INTERNAL`` and logged with its traceback: a bug, never the
  answer to bad input.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from sandbox.api.grpc.batches import fitting, step_orders
from sandbox.api.grpc.decoding import DecodeWarnings, Undecodable, add_tolerant_servicer
from sandbox.api.grpc.probes import add_probes, follow_readiness
from sandbox.api.grpc.step_streams import StepStreams
from sandbox.errors import InternalError, InvalidArgument, SandboxError, Unauthenticated
from sandbox.models import SandboxInfo
from sandbox.service import Principal, SandboxService, TokenRegistry
from sandbox.service.preview import PreviewLinks, port_url
from sandbox.service.trajectory_ops import RECORD_NEEDS_A_TASK
from sandbox.trajectories.models import MEDIA_CHUNK_BYTES
from sandbox.wire import convert
from sandbox.wire import episodes as wire_episodes
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc
from sandbox.wire.limits import MESSAGE_SIZE_OPTIONS
from sandbox.wire.status import ERROR_CODE_KEY, grpc_status

Req = TypeVar("Req")
Resp = TypeVar("Resp")
T = TypeVar("T")

Handler = Callable[["SandboxServicer", Principal, Req], Awaitable[Resp]]
Rpc = Callable[["SandboxServicer", Req, grpc.aio.ServicerContext], Awaitable[Resp]]
TRANSPORT = "grpc"


def _unary(handler: Handler[Req, Resp]) -> Rpc[Req, Resp]:
    """A unary RPC from ``handler(self, principal, request)``: authenticate, call, translate errors."""

    @functools.wraps(handler)
    async def rpc(self: SandboxServicer, request: Req, context: grpc.aio.ServicerContext) -> Resp:
        method = handler.__name__
        return await self._serve(
            context, method, lambda principal: handler(self, principal, self._parsed(method, request))
        )

    return rpc


class SandboxServicer:
    """Implements ``sandbox.v1.SandboxService``; one instance serves every call."""

    def __init__(
        self,
        *,
        service: SandboxService,
        tokens: TokenRegistry,
        logger: logging.Logger,
        preview: PreviewLinks | None = None,
        step_streams: StepStreams | None = None,
    ) -> None:
        self._service = service
        self._streams = step_streams or StepStreams()
        self._tokens = tokens
        self._log = logger
        self._preview = preview or PreviewLinks()
        self.readiness: asyncio.Task[None] | None = None
        """Reports the service's readiness to the health service while the server runs."""
        self._decode_warnings = DecodeWarnings(logger)

    def _parsed(self, method: str, request: T) -> T:
        """``request``, or InvalidArgument if its bytes did not parse (see :mod:`sandbox.api.grpc.decoding`)."""
        if isinstance(request, Undecodable):
            self._decode_warnings.saw(method, request)
            raise request.error()
        return request

    # ------------------------------------------------------------------ plumbing

    def _principal(self, context: grpc.aio.ServicerContext) -> Principal:
        token: str | None = None
        for key, value in context.invocation_metadata() or ():
            if key.lower() == "authorization":
                scheme, _, credential = str(value).partition(" ")
                if scheme.lower() != "bearer" or not credential.strip():
                    raise Unauthenticated("the authorization metadata must read 'Bearer <token>'")
                token = credential.strip()
        return self._tokens.authenticate(token)

    def _status(self, error: Exception, method: str) -> tuple[grpc.StatusCode, str]:
        """The status a failed call answers with; every failed call is counted here."""
        # A request the models reject arrives here as InvalidArgument (convert names the field). A bare
        # ValidationError was raised building a model from the service's own data: a bug, so INTERNAL.
        if isinstance(error, SandboxError):
            code, message = grpc_status(error), error.message
            if isinstance(error, InternalError):
                self._log.error(
                    "internal error in %s: %s", method, message, exc_info=error, extra=_log_fields(method, code)
                )
        else:
            code = grpc.StatusCode.INTERNAL
            message = f"internal error in {method} ({type(error).__name__}); see the server log"
            self._log.error("unexpected error in %s", method, exc_info=error, extra=_log_fields(method, code))
        self._service.metrics.api_error(TRANSPORT, method, code.name)
        return code, message

    async def _serve(
        self, context: grpc.aio.ServicerContext, method: str, call: Callable[[Principal], Awaitable[T]]
    ) -> T:
        try:
            return await call(self._principal(context))
        except Exception as e:
            code, message = self._status(e, method)
            trailer = ((ERROR_CODE_KEY, e.code),) if isinstance(e, SandboxError) else ()
        await context.abort(code, message, trailing_metadata=trailer)
        raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises

    # ------------------------------------------------------------------ lifecycle

    @_unary
    async def CreateSandbox(self, principal: Principal, request: pb.CreateSandboxRequest) -> pb.SandboxInfo:
        spec = convert.spec_from_proto(request.spec)
        return convert.info_to_proto(await self._service.create(principal, spec, wait_s=request.wait_s))

    @_unary
    async def CreateSandboxes(
        self, principal: Principal, request: pb.CreateSandboxesRequest
    ) -> pb.CreateSandboxesResponse:
        spec = convert.spec_from_proto(request.spec)
        if request.each:
            made = await self._service.create_each(principal, spec, request.count, wait_s=request.wait_s)
            return pb.CreateSandboxesResponse(outcomes=[self._create_outcome(m) for m in made])
        infos = await self._service.create_group(principal, spec, request.count, wait_s=request.wait_s)
        return pb.CreateSandboxesResponse(sandboxes=[convert.info_to_proto(i) for i in infos])

    def _create_outcome(self, made: SandboxInfo | SandboxError) -> pb.CreateOutcome:
        if isinstance(made, SandboxError):  # counted as the CreateSandbox call it stands for
            return pb.CreateOutcome(error=self._error(made, "CreateSandbox"))
        return pb.CreateOutcome(sandbox=convert.info_to_proto(made))

    @_unary
    async def GetSandbox(self, principal: Principal, request: pb.GetSandboxRequest) -> pb.SandboxInfo:
        return convert.info_to_proto(await self._service.get(principal, request.sandbox_id))

    @_unary
    async def ListSandboxes(self, principal: Principal, request: pb.ListSandboxesRequest) -> pb.ListSandboxesResponse:
        infos = await self._service.list_sandboxes(principal)
        waiting = [pb.WaitingCall(**w.model_dump()) for w in self._service.waiting(principal)]
        return pb.ListSandboxesResponse(sandboxes=[convert.info_to_proto(i) for i in infos], waiting=waiting)

    @_unary
    async def GetCapacity(self, principal: Principal, request: pb.GetCapacityRequest) -> pb.CapacityReport:
        return pb.CapacityReport(json=self._service.capacity(principal).model_dump_json())

    @_unary
    async def DeleteSandbox(self, principal: Principal, request: pb.DeleteSandboxRequest) -> pb.DeleteSandboxResponse:
        await self._service.delete(principal, request.sandbox_id)
        return pb.DeleteSandboxResponse()

    @_unary
    async def Reset(self, principal: Principal, request: pb.ResetRequest) -> pb.ResetResponse:
        snapshot = request.snapshot if request.HasField("snapshot") else None
        if request.HasField("task_json"):
            if snapshot is not None:
                raise InvalidArgument("reset to a task or to a snapshot, not both")
            task = self._service.load_task(request.task_json, fixtures=dict(request.fixtures))
            info, obs = await self._service.reset_to_task(
                principal, request.sandbox_id, task, record_screen=request.record
            )
            return pb.ResetResponse(sandbox=convert.info_to_proto(info), observation=convert.observation_to_proto(obs))
        if request.record:
            raise InvalidArgument(RECORD_NEEDS_A_TASK)
        info = await self._service.reset(principal, request.sandbox_id, snapshot=snapshot)
        return pb.ResetResponse(sandbox=convert.info_to_proto(info))

    @_unary
    async def Renew(self, principal: Principal, request: pb.RenewRequest) -> pb.SandboxInfo:
        ttl_s = request.ttl_s if request.HasField("ttl_s") else None
        renewal = convert.validate(convert.Renewal, {"ttl_s": ttl_s}, what="renewal")
        return convert.info_to_proto(await self._service.renew(principal, request.sandbox_id, ttl_s=renewal.ttl_s))

    # ------------------------------------------------------------------ snapshots

    @_unary
    async def CreateSnapshot(self, principal: Principal, request: pb.CreateSnapshotRequest) -> pb.SnapshotInfo:
        info = await self._service.snapshot(principal, request.sandbox_id, request.name, warm=request.warm)
        return convert.snapshot_to_proto(info)

    @_unary
    async def ListSnapshots(self, principal: Principal, request: pb.ListSnapshotsRequest) -> pb.ListSnapshotsResponse:
        snapshots = await self._service.list_snapshots(principal)
        return pb.ListSnapshotsResponse(snapshots=[convert.snapshot_to_proto(s) for s in snapshots])

    @_unary
    async def DeleteSnapshot(
        self, principal: Principal, request: pb.DeleteSnapshotRequest
    ) -> pb.DeleteSnapshotResponse:
        await self._service.delete_snapshot(principal, request.name)
        return pb.DeleteSnapshotResponse()

    # ------------------------------------------------------------------ acting

    async def _step(self, principal: Principal, request: pb.StepRequest) -> pb.StepResponse:
        if request.HasField("observe"):
            if request.HasField("action"):
                raise InvalidArgument("a step either acts or observes: give `action` or `observe`, not both")
            return pb.StepResponse(observation=await self._observe(principal, request.sandbox_id, request.observe))
        action = convert.action_from_proto(request.action)
        obs = await self._service.step(principal, request.sandbox_id, action, screenshot=request.screenshot)
        return pb.StepResponse(observation=convert.observation_to_proto(obs))

    @_unary
    async def Step(self, principal: Principal, request: pb.StepRequest) -> pb.StepResponse:
        return await self._step(principal, request)

    async def StepStream(
        self, requests: AsyncIterator[pb.StepRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StepResponse]:
        """One response per request, in order; a failed step answers with an error and the stream goes on."""
        try:
            principal = self._principal(context)
        except SandboxError as e:
            await context.abort(*self._status(e, "StepStream"))
            return
        pending = aiter(requests)
        while (request := await self._streams.next_request(pending)) is not None:
            try:
                response = await self._step(principal, self._parsed("StepStream", request))
            except Exception as e:
                response = self._failed_step(e, "StepStream")
            yield response

    def _failed_step(self, error: Exception, method: str) -> pb.StepResponse:
        return pb.StepResponse(error=self._error(error, method))

    def _error(self, error: Exception, method: str) -> pb.StepError:
        """One item's error in a batch or stream answer (counted as a failed ``method`` call)."""
        code, message = self._status(error, method)
        return pb.StepError(code=code.value[0], message=message)

    @_unary
    async def StepMany(self, principal: Principal, request: pb.StepManyRequest) -> pb.StepManyResponse:
        outcomes = await self._service.step_many(principal, step_orders(request))
        reply = pb.StepManyResponse(
            results=[
                self._failed_step(o, "StepMany")
                if isinstance(o, SandboxError)
                else pb.StepResponse(observation=convert.observation_to_proto(o))
                for o in outcomes
            ]
        )
        return fitting(reply)

    @_unary
    async def Observe(self, principal: Principal, request: pb.ObserveRequest) -> pb.Observation:
        return await self._observe(principal, request.sandbox_id, request)

    async def _observe(
        self, principal: Principal, sandbox_id: str, request: pb.ObserveRequest | pb.ObserveOptions
    ) -> pb.Observation:
        options: dict[str, Any] = {}
        if request.HasField("format"):
            options["format"] = request.format
        if request.HasField("quality"):
            options["quality"] = request.quality
        return convert.observation_to_proto(await self._service.observe(principal, sandbox_id, **options))

    @_unary
    async def Exec(self, principal: Principal, request: pb.ExecRequest) -> pb.ExecResult:
        exec_request = convert.exec_from_proto(request.exec)
        return convert.exec_result_to_proto(await self._service.exec(principal, request.sandbox_id, exec_request))

    # ------------------------------------------------------------------ files

    @_unary
    async def ReadFile(self, principal: Principal, request: pb.ReadFileRequest) -> pb.ReadFileResponse:
        length = request.length if request.HasField("length") else None
        data = await self._service.read_file(
            principal, request.sandbox_id, request.path, offset=request.offset, length=length
        )
        return pb.ReadFileResponse(data=data)

    @_unary
    async def WriteFile(self, principal: Principal, request: pb.WriteFileRequest) -> pb.WriteFileResponse:
        options: dict[str, Any] = {"append": request.append}
        if request.HasField("mode"):
            options["mode"] = request.mode
        size = await self._service.write_file(principal, request.sandbox_id, request.path, request.data, **options)
        return pb.WriteFileResponse(size=size)

    @_unary
    async def ListFiles(self, principal: Principal, request: pb.ListFilesRequest) -> pb.ListFilesResponse:
        files = await self._service.list_files(principal, request.sandbox_id, request.path)
        return pb.ListFilesResponse(files=[convert.file_info_to_proto(f) for f in files])

    @_unary
    async def DeleteFile(self, principal: Principal, request: pb.DeleteFileRequest) -> pb.DeleteFileResponse:
        await self._service.delete_file(principal, request.sandbox_id, request.path, recursive=request.recursive)
        return pb.DeleteFileResponse()

    # ------------------------------------------------------------------ inspection

    @_unary
    async def Health(self, principal: Principal, request: pb.HealthRequest) -> pb.Health:
        return convert.health_to_proto(await self._service.health(principal, request.sandbox_id))

    @_unary
    async def Logs(self, principal: Principal, request: pb.LogsRequest) -> pb.LogsResponse:
        options: dict[str, Any] = {}
        if request.HasField("tail"):
            options["tail"] = request.tail
        return pb.LogsResponse(text=await self._service.logs(principal, request.sandbox_id, **options))

    # ------------------------------------------------------------------ episodes and trajectories

    @_unary
    async def Evaluate(self, principal: Principal, request: pb.EvaluateRequest) -> pb.EvaluateResponse:
        return pb.EvaluateResponse(reward=await self._service.evaluate(principal, request.sandbox_id))

    @_unary
    async def ListTrajectories(
        self, principal: Principal, request: pb.ListTrajectoriesRequest
    ) -> pb.ListTrajectoriesResponse:
        task_id = request.task_id if request.HasField("task_id") else None
        found = await self._service.list_trajectories(principal, task_id=task_id)
        return pb.ListTrajectoriesResponse(trajectories=[wire_episodes.trajectory_info_to_proto(t) for t in found])

    @_unary
    async def GetTrajectory(self, principal: Principal, request: pb.GetTrajectoryRequest) -> pb.Trajectory:
        found = await self._service.get_trajectory(principal, request.trajectory_id)
        return wire_episodes.trajectory_to_proto(found)

    @_unary
    async def GetTrajectoryFrame(self, principal: Principal, request: pb.GetTrajectoryFrameRequest) -> pb.Screenshot:
        shot = await self._service.trajectory_frame(principal, request.trajectory_id, request.sha256)
        return wire_episodes.screenshot_to_proto(shot)

    @_unary
    async def GetTrajectoryMedia(
        self, principal: Principal, request: pb.GetTrajectoryMediaRequest
    ) -> pb.GetTrajectoryMediaResponse:
        length = request.length if request.HasField("length") else MEDIA_CHUNK_BYTES
        if request.offset < 0 or length < 0:
            raise InvalidArgument("offset and length must be >= 0")
        ref, data = await self._service.trajectory_media(
            principal,
            request.trajectory_id,
            request.sha256,
            offset=request.offset,
            length=min(length, MEDIA_CHUNK_BYTES),
        )
        return pb.GetTrajectoryMediaResponse(media=wire_episodes.media_ref_to_proto(ref), data=data)

    @_unary
    async def DeleteTrajectory(
        self, principal: Principal, request: pb.DeleteTrajectoryRequest
    ) -> pb.DeleteTrajectoryResponse:
        await self._service.delete_trajectory(principal, request.trajectory_id)
        return pb.DeleteTrajectoryResponse()

    # ------------------------------------------------------------------ previews

    @_unary
    async def OpenLane(self, principal: Principal, request: pb.OpenLaneRequest) -> pb.Lane:
        """REST's ``POST /v1/sandboxes/{id}/lane``: a direct lane to the sandbox's agent (docs/lanes.md)."""
        return convert.lane_to_proto(await self._service.open_lane(principal, request.sandbox_id))

    @_unary
    async def PreviewUrl(self, principal: Principal, request: pb.PreviewUrlRequest) -> pb.PortUrl:
        """REST's ``POST /v1/sandboxes/{id}/urls``: the same checks, the same ticket, the public HTTP address."""
        wanted = convert.url_request_from_proto(request)
        preview = self._preview
        minted = await port_url(
            self._service,
            preview.tickets,
            principal,
            request.sandbox_id,
            wanted.port,
            ttl_s=wanted.ttl_s,
            base_url=preview.base_url,
            full_path=wanted.full_path,
        )
        return convert.port_url_to_proto(minted)


def _log_fields(method: str, code: grpc.StatusCode) -> dict[str, str]:
    return {"method": method, "code": code.name, "transport": TRANSPORT}


async def bind_grpc_server(
    service: SandboxService,
    tokens: TokenRegistry,
    *,
    host: str,
    port: int,
    logger: logging.Logger,
    preview: PreviewLinks | None = None,
    step_streams: StepStreams | None = None,
) -> tuple[grpc.aio.Server, int]:
    """Start serving on ``host:port`` (``port=0``: any free port); the server and the port it got. ``preview``: the
    ticket issuer and HTTP address of preview URLs (share its issuer with the REST app's, so the tickets open).
    ``step_streams``: call its ``end()`` before stopping the server, so idle step streams do not hold the stop."""
    server = grpc.aio.server(
        options=[
            *MESSAGE_SIZE_OPTIONS,
            # Without this, Linux lets a second server bind a port already in use and the two share it.
            ("grpc.so_reuseport", 0),
        ]
    )
    servicer = SandboxServicer(
        service=service, tokens=tokens, logger=logger, preview=preview, step_streams=step_streams
    )
    add_tolerant_servicer(servicer, server, pb_grpc.add_SandboxServiceServicer_to_server)
    health = await add_probes(server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    cause: RuntimeError | None = None
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError as e:  # grpc >= 1.5x raises; older versions return 0
        bound, cause = 0, e
    if not bound:
        await server.stop(None)
        raise InvalidArgument(f"cannot serve gRPC on {address}: the port is in use or the address is not local") from (
            cause
        )
    await server.start()
    # Ends with the server: no task outlives a stopped server.
    servicer.readiness = asyncio.create_task(follow_readiness(server, health, service, logger=logger))
    logger.info("gRPC API listening on %s", f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}")
    return server, bound


async def start_grpc_server(
    service: SandboxService,
    tokens: TokenRegistry,
    *,
    host: str,
    port: int,
    logger: logging.Logger,
    preview: PreviewLinks | None = None,
    step_streams: StepStreams | None = None,
) -> grpc.aio.Server:
    """Bind ``host:port`` and start serving the API; raises :class:`InvalidArgument` if the port is taken."""
    server, _ = await bind_grpc_server(
        service, tokens, host=host, port=port, logger=logger, preview=preview, step_streams=step_streams
    )
    return server
