"""The asyncio SDK: :class:`AsyncClient`, :class:`AsyncSandbox`, :class:`AsyncFiles`, :class:`AsyncStepStream`.

Every method hands an operation from :mod:`sandbox.client._ops` to
:func:`~sandbox.client._ops.drive_async` over a ``grpc.aio`` channel; the logic lives in ``_ops``.
:mod:`sandbox.client._sync` is the same surface, blocking (``tests/unit/client/test_sdk_parity.py``
keeps the signatures identical).
"""

from __future__ import annotations

import asyncio
import builtins
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, overload

import grpc

from sandbox.capacity.report import CapacityReport, WaitingCall
from sandbox.client import _episodes, _ops
from sandbox.client._creates import CreateCoalescer
from sandbox.client._episodes import TaskLike
from sandbox.client._errors import deadline_exceeded, rpc_error, translate
from sandbox.client._lane import AsyncLane
from sandbox.errors import SandboxError, Unavailable
from sandbox.models import (
    Action,
    ExecResult,
    FileInfo,
    Health,
    LaneInfo,
    Observation,
    SandboxInfo,
    Screenshot,
    SnapshotInfo,
)
from sandbox.trajectories.models import Trajectory, TrajectoryInfo
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc

T = TypeVar("T")


class AsyncClient:
    """A connection to the control plane's gRPC API, for asyncio. Close it (or ``async with``) when done.

    The channel opens on first use, in the running event loop, and belongs to that loop.
    """

    def __init__(self, target: str | None = None, *, token: str | None = None, timeout: float = 120) -> None:
        """``target``: the control plane's gRPC address; SANDBOX_TARGET, else 127.0.0.1:50051, when None."""
        self.target = _ops.target_or_default(target)
        self.timeout = timeout
        self._metadata = _ops.metadata(token)
        self.trajectories = AsyncTrajectories(self)
        """The recorded episodes this caller may see: ``client.trajectories.list(task_id=...)``, ``get``, ``frame``,
        ``media``, ``delete``."""
        self._channel: grpc.aio.Channel | None = None
        self._stub_instance: Any = None
        self._creates = CreateCoalescer(
            each=lambda count, spec: self._run(_ops.create_each(count, spec)),
            one=lambda spec: self._run(_ops.create_spec(spec)),
            delete=lambda sandbox_id: self._run(_ops.delete(sandbox_id, missing_ok=True)),
        )

    def _stub(self) -> Any:
        if self._stub_instance is None:
            self._channel = grpc.aio.insecure_channel(self.target, options=_ops.CHANNEL_OPTIONS)
            self._stub_instance = pb_grpc.SandboxServiceStub(self._channel)
        return self._stub_instance

    async def _perform(self, call: _ops.Call) -> Any:
        rpc = getattr(self._stub(), call.method)
        timeout = _ops.deadline(call, self.timeout)
        try:
            return await rpc(call.request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise rpc_error(e, self.target, method=call.method, timeout=timeout) from e

    async def _run(self, op: _ops.Op[T]) -> T:
        return await _ops.drive_async(op, self._perform)

    async def create(self, kind: str, *, wait_s: float = 0.0, **spec: Any) -> AsyncSandbox:
        """A new sandbox; ``spec`` takes the fields of ``models.SandboxSpec`` (image, resources, screen, ...,
        ``snapshot`` to start from one, the lease (``ttl_s``, ``idle_timeout_s``: None is never), ``auto_recover``).
        When the host or the tenant's quota has no room, ``ResourceExhausted`` says why at once, or, with ``wait_s``,
        the call queues that long for capacity first (docs/capacity.md).

        Creates of one spec this client starts in the same turn of the event loop (``asyncio.gather`` of many) with
        no ``wait_s`` go to the server in one call, each still made and answered on its own (``_creates.py``)."""
        if wait_s:
            return AsyncSandbox(self, await self._run(_ops.create(kind, spec, wait_s=wait_s)))
        return AsyncSandbox(self, await self._creates.create(_ops.full_spec(kind, spec)))

    async def create_group(
        self, count: int, kind: str, *, wait_s: float = 0.0, **spec: Any
    ) -> builtins.list[AsyncSandbox]:
        """``count`` sandboxes of one spec (a rollout group), made at once in one call: all of them, or none (when
        one cannot be made, the others are deleted and its error raised). The whole group is admitted before any
        starts. ``spec`` and ``wait_s`` as for ``create``."""
        infos = await self._run(_ops.create_group(count, kind, spec, wait_s=wait_s))
        return [AsyncSandbox(self, info) for info in infos]

    async def waiting(self) -> builtins.list[WaitingCall]:
        """This caller's creates queued for capacity (every tenant's to an admin), in the order they will be served."""
        return await self._run(_ops.waiting())

    async def capacity(self) -> CapacityReport:
        """The host's capacity, what is reserved and free, who waits, and this tenant's use and quota."""
        return await self._run(_ops.capacity())

    async def step_many(
        self,
        steps: Iterable[tuple[AsyncSandbox | str, Action | Mapping[str, Any] | str]],
        *,
        screenshot: bool = False,
    ) -> builtins.list[Observation | SandboxError]:
        """A step in each of many sandboxes, all at once, in one call (a vectorized environment's step):
        ``steps`` pairs a sandbox (or its id) with its action, one step a sandbox, at most 1024. The answers come in
        the steps' order, each the step's observation or its error, returned, not raised (like ``asyncio.gather``'s
        ``return_exceptions``): one sandbox failing fails no other. A malformed batch raises InvalidArgument before
        any step is done."""
        pairs = [(sb.id if isinstance(sb, AsyncSandbox) else sb, action) for sb, action in steps]
        return await self._run(_ops.step_many(pairs, screenshot=screenshot))

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox (closing it deletes the sandbox)."""
        return AsyncSandbox(self, await self._run(_ops.get(sandbox_id)))

    async def list(self) -> builtins.list[SandboxInfo]:
        """The sandboxes this caller may see."""
        return await self._run(_ops.list_sandboxes())

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        """The snapshots this caller may see (``Sandbox.snapshot`` takes one)."""
        return await self._run(_ops.list_snapshots())

    async def delete_snapshot(self, name: str) -> None:
        """Delete one of the caller's snapshots (sandboxes started from it keep running)."""
        await self._run(_ops.delete_snapshot(name))

    async def close(self) -> None:
        """Close the connection; sandboxes keep running."""
        await self._creates.close()
        channel, self._channel, self._stub_instance = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncSandbox:
    """One sandbox. ``async with await client.create(kind="terminal") as sb:`` deletes it at the end."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        self._client = client
        self.info = info
        self.files = AsyncFiles(self)
        self._closed = False
        self._steps = AsyncStepStream(self)

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, kind={self.info.kind.value!r})"

    async def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        """Do one action (a model or a dict such as ``{"type": "click", "x": 10, "y": 20}``; or OSWorld's output as
        it is: pyautogui code, ``"WAIT"``, ``"DONE"``, ``"FAIL"``). In an episode, ``done`` and ``info`` say where it
        stands (``info``: steps, truncated, reason, task_id, trajectory_id).

        Steps go over a stream this handle keeps open (gRPC spends about half as much on a message of an open
        stream as on a call); a step made while another of this handle's is in flight goes as a call of its own."""
        if self._steps._busy:
            return await self._client._run(_ops.step(self.id, action, screenshot=screenshot))
        request, budget = _ops.checked_step(self.id, action, screenshot=screenshot)
        return _ops.step_result(await self._steps._exchange(request, max(self._client.timeout, budget)))

    async def _open_lane(self) -> LaneInfo:
        """A direct lane's grant (``OpenLane``): what the lane asks for when it needs one."""
        return await self._client._run(_ops.open_lane(self.id))

    def lane(self) -> AsyncLane:
        """Steps over a direct lane to the sandbox's agent, the control plane out of the path (docs/lanes.md):
        ``with sb.lane() as lane:``. What a lane does not carry (an episode's steps among them) goes through the
        control plane, with the same result."""
        return AsyncLane(self)

    def step_stream(self) -> AsyncStepStream:
        """Steps over a bidirectional stream of their own: ``async with sb.step_stream() as s:``. (``step`` already
        goes over a stream this handle keeps; this one is closed when the block ends.)"""
        return AsyncStepStream(self)

    async def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        """The current screen (display kinds) and page (browser) without acting. Goes over the stream ``step``
        uses, or as a call of its own while a step of this handle is in flight."""
        if self._steps._busy:
            return await self._client._run(_ops.observe(self.id, format=format, quality=quality))
        request = _ops.observe_step_request(self.id, format=format, quality=quality)
        return _ops.step_result(await self._steps._exchange(request, self._client.timeout))

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float = 60,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        session: str | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        """Run a shell string or an argv list; ``session`` keeps a shell (cwd, variables) between calls."""
        op = _ops.exec_(
            self.id, cmd, timeout=timeout, cwd=cwd, env=env, session=session, keep_background=keep_background
        )
        return await self._client._run(op)

    @overload
    async def reset(self, snapshot: str | None = None) -> SandboxInfo: ...

    @overload
    async def reset(self, snapshot: str | None = None, *, task: TaskLike, record: bool = False) -> Observation: ...

    async def reset(
        self, snapshot: str | None = None, *, task: TaskLike | None = None, record: bool = False
    ) -> SandboxInfo | Observation:
        """Back to the initial state (a fresh sandbox from the same spec, or from the snapshot named here,
        which the sandbox keeps from then on); the refreshed info.

        With ``task`` (a ``Task``, its dict, or the path of its JSON file): the start of an episode of it — its
        setup run, or its post-setup snapshot swapped in — and the episode's first observation. The files its
        ``download`` steps fetch are sent along from its fixtures (those beside its file). ``record`` (android
        sandboxes): the episode's screen is recorded into its trajectory (``trajectories.media``)."""
        self.info, obs = await self._client._run(_episodes.reset(self.id, snapshot=snapshot, task=task, record=record))
        return self.info if obs is None else obs

    async def evaluate(self) -> float:
        """Score the episode (since the last reset to a task) with the task's evaluator: the reward in [0, 1]."""
        return await self._client._run(_episodes.evaluate(self.id))

    async def renew(self, ttl_s: float | None = None) -> SandboxInfo:
        """Extend the lease: the sandbox now expires ``ttl_s`` (default: its spec's ttl_s) from now."""
        self.info = await self._client._run(_ops.renew(self.id, ttl_s=ttl_s))
        return self.info

    async def snapshot(self, name: str, *, warm: int = 0) -> SnapshotInfo:
        """Keep the file system (and a desktop's GUI apps) as snapshot ``name`` of the caller's, to create or
        reset sandboxes from (``client.create(kind, snapshot=name)``, ``reset(snapshot=name)``); ``warm``
        replicas are kept running so that a reset to it takes no start."""
        return await self._client._run(_ops.snapshot(self.id, name, warm=warm))

    async def refresh(self) -> SandboxInfo:
        """The sandbox's current info (state, last activity)."""
        self.info = await self._client._run(_ops.get(self.id))
        return self.info

    async def url(self, port: int, *, ttl: float | None = None, full_path: bool = False) -> str:
        """A URL that opens ``port`` inside the sandbox (HTTP and websockets, proxied by the control plane's HTTP
        server; docs/preview.md). It carries a ticket for that port only, valid ``ttl`` seconds (default 300, at
        most 86400) and traded for a cookie on first use. Ports 1024-65535, not the platform's own. ``full_path``:
        the ``/v1/sandboxes/{id}/apps/{port}/`` form, whose app gets the whole path (tell it that path as its base
        path, e.g. Jupyter's ``base_url``); else ``/ports/{port}/``, the prefix stripped."""
        return await self._client._run(_ops.preview_url(self.id, port, ttl_s=ttl, full_path=full_path))

    async def health(self) -> Health:
        return await self._client._run(_ops.health(self.id))

    async def logs(self, tail: int = 200) -> str:
        return await self._client._run(_ops.logs(self.id, tail=tail))

    async def close(self) -> None:
        """Delete the sandbox. Idempotent; a sandbox already gone is not an error."""
        self._steps._drop()
        if not self._closed:
            await self._client._run(_ops.delete(self.id, missing_ok=True))
            self._closed = True

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncFiles:
    """The sandbox's file system (relative paths are relative to /workspace)."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox

    async def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        return await self._sandbox._client._run(_ops.read_file(self._sandbox.id, path, offset=offset, length=length))

    async def write(self, path: str, data: bytes | str, *, mode: int = 0o644, append: bool = False) -> int:
        """Write (or append) ``data`` (str is UTF-8); the file's size afterwards."""
        return await self._sandbox._client._run(_ops.write_file(self._sandbox.id, path, data, mode=mode, append=append))

    async def list(self, path: str = "/workspace") -> builtins.list[FileInfo]:
        return await self._sandbox._client._run(_ops.list_files(self._sandbox.id, path))

    async def delete(self, path: str, recursive: bool = False) -> None:
        await self._sandbox._client._run(_ops.delete_file(self._sandbox.id, path, recursive=recursive))

    async def upload(self, local_path: str | os.PathLike[str], remote_path: str) -> int:
        """Copy a local file in; the number of bytes copied."""
        return await self._sandbox._client._run(_ops.upload(self._sandbox.id, local_path, remote_path))

    async def download(self, remote_path: str, local_path: str | os.PathLike[str]) -> int:
        """Copy a file out; the number of bytes copied."""
        return await self._sandbox._client._run(_ops.download(self._sandbox.id, remote_path, local_path))


class AsyncTrajectories:
    """The recorded episodes this caller may see (every tenant's for an admin)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self, *, task_id: str | None = None) -> builtins.list[TrajectoryInfo]:
        """Their summaries, of ``task_id`` if given, oldest first."""
        return await self._client._run(_episodes.list_trajectories(task_id=task_id))

    async def get(self, trajectory_id: str) -> Trajectory:
        """A trajectory with its steps (frames by hash: ``frame``)."""
        return await self._client._run(_episodes.get_trajectory(trajectory_id))

    async def frame(self, trajectory_id: str, sha256: str) -> Screenshot:
        """One screenshot of a trajectory, by the hash its steps name (``step.frame.sha256``)."""
        return await self._client._run(_episodes.trajectory_frame(trajectory_id, sha256))

    async def media(self, trajectory_id: str, sha256: str) -> bytes:
        """A medium kept with a trajectory (a screen recording: ``info.media[].sha256``), its bytes."""
        return await self._client._run(_episodes.trajectory_media(trajectory_id, sha256))

    async def delete(self, trajectory_id: str) -> None:
        await self._client._run(_episodes.delete_trajectory(trajectory_id))


class AsyncStepStream:
    """Steps over one ``StepStream`` RPC: no per-call setup, one response per step, in order.

    A failed step raises its error and the stream goes on. Close it (or ``async with``) when done.
    """

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sandbox = sandbox
        self._call: Any = None
        self._lock = asyncio.Lock()

    @property
    def _busy(self) -> bool:
        """Whether a step is in flight on it."""
        return self._lock.locked()

    async def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        request = _ops.step_request(self._sandbox.id, action, screenshot=screenshot)
        return _ops.step_result(await self._exchange(request, None))

    async def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        """As ``AsyncSandbox.observe``, on this stream."""
        request = _ops.observe_step_request(self._sandbox.id, format=format, quality=quality)
        return _ops.step_result(await self._exchange(request, None))

    async def _exchange(self, request: pb.StepRequest, deadline: float | None) -> pb.StepResponse:
        """``request``'s response, within ``deadline`` seconds (None: no limit)."""
        target = self._sandbox._client.target
        async with self._lock:  # one step in flight: responses pair with requests in order
            try:
                async with asyncio.timeout(deadline):
                    call = await self._written(request)
                    reply = await call.read()
            except BaseException as e:
                # Given up midway (cancelled, timed out) or failed: which replies are still to come is unknown, so
                # this stream is done; the next step opens another.
                self._drop()
                if isinstance(e, grpc.RpcError):
                    raise rpc_error(e, target, method="StepStream", timeout=None) from e
                if isinstance(e, TimeoutError) and deadline is not None:
                    raise deadline_exceeded("Step", target, deadline) from e
                raise
            if reply is grpc.aio.EOF:
                self._drop()
                raise Unavailable("the step stream ended before answering")
            return reply

    async def _written(self, request: pb.StepRequest) -> Any:
        """The stream, with ``request`` written on it. One found ended before the write (its server stopped since
        the last step) is opened again once: nothing was sent on it."""
        client = self._sandbox._client
        for attempt in range(2):
            if self._call is None or self._call.done():
                self._call = client._stub().StepStream(metadata=client._metadata)
            call = self._call
            try:
                await call.write(request)
                return call
            except (grpc.RpcError, asyncio.InvalidStateError) as e:
                self._drop()
                if attempt and isinstance(e, grpc.RpcError):
                    raise
                if attempt:  # it ended again before a write: say why, as the server put it
                    code, details = await call.code(), await call.details()
                    raise translate(
                        code,
                        details or "the step stream ended",
                        target=client.target,
                        method="StepStream",
                        timeout=None,
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self) -> None:
        """Cancel the stream at once (a later step opens another)."""
        call, self._call = self._call, None
        if call is not None:
            call.cancel()

    async def close(self) -> None:
        """End the stream (the server finishes the steps it has)."""
        call, self._call = self._call, None
        if call is not None:
            try:
                await call.done_writing()
                while await call.read() is not grpc.aio.EOF:
                    pass
            except grpc.RpcError:
                pass

    async def __aenter__(self) -> AsyncStepStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
