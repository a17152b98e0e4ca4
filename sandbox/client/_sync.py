"""The blocking SDK: :class:`Client`, :class:`Sandbox`, :class:`Files`, :class:`StepStream`.

Every method hands an operation from :mod:`sandbox.client._ops` to :func:`~sandbox.client._ops.drive`
over a blocking gRPC channel; the logic lives in ``_ops``. :mod:`sandbox.client._async` is the same
surface over ``grpc.aio`` (``tests/unit/client/test_sdk_parity.py`` keeps the signatures identical).
"""

from __future__ import annotations

import builtins
import os
import queue
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, overload

import grpc

from sandbox.capacity.report import CapacityReport, WaitingCall
from sandbox.client import _episodes, _ops
from sandbox.client._episodes import TaskLike
from sandbox.client._errors import rpc_error
from sandbox.client._lane import Lane
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


class Client:
    """A connection to the control plane's gRPC API. Thread-safe; close it (or use ``with``) when done."""

    def __init__(self, target: str | None = None, *, token: str | None = None, timeout: float = 120) -> None:
        """``target``: the control plane's gRPC address; SANDBOX_TARGET, else 127.0.0.1:50051, when None."""
        self.target = _ops.target_or_default(target)
        self.timeout = timeout
        self._metadata = _ops.metadata(token)
        self.trajectories = Trajectories(self)
        """The recorded episodes this caller may see: ``client.trajectories.list(task_id=...)``, ``get``, ``frame``,
        ``media``, ``delete``."""
        self._channel = grpc.insecure_channel(self.target, options=_ops.CHANNEL_OPTIONS)
        self._stub = pb_grpc.SandboxServiceStub(self._channel)

    def _perform(self, effect: _ops.Effect) -> Any:
        if isinstance(effect, _ops.Local):
            return effect.fn()
        rpc = getattr(self._stub, effect.method)
        timeout = _ops.deadline(effect, self.timeout)
        try:
            return rpc(effect.request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise rpc_error(e, self.target, method=effect.method, timeout=timeout) from e

    def _run(self, op: _ops.Op[T]) -> T:
        return _ops.drive(op, self._perform)

    def create(self, kind: str, *, wait_s: float = 0.0, **spec: Any) -> Sandbox:
        """A new sandbox; ``spec`` takes the fields of ``models.SandboxSpec`` (image, resources, screen, ...,
        ``snapshot`` to start from one, the lease (``ttl_s``, ``idle_timeout_s``: None is never), ``auto_recover``).
        When the host or the tenant's quota has no room, ``ResourceExhausted`` says why at once, or, with ``wait_s``,
        the call queues that long for capacity first (docs/capacity.md)."""
        return Sandbox(self, self._run(_ops.create(kind, spec, wait_s=wait_s)))

    def create_group(self, count: int, kind: str, *, wait_s: float = 0.0, **spec: Any) -> builtins.list[Sandbox]:
        """``count`` sandboxes of one spec (a rollout group), made at once in one call: all of them, or none (when
        one cannot be made, the others are deleted and its error raised). The whole group is admitted before any
        starts. ``spec`` and ``wait_s`` as for ``create``."""
        return [Sandbox(self, info) for info in self._run(_ops.create_group(count, kind, spec, wait_s=wait_s))]

    def waiting(self) -> builtins.list[WaitingCall]:
        """This caller's creates queued for capacity (every tenant's to an admin), in the order they will be served."""
        return self._run(_ops.waiting())

    def capacity(self) -> CapacityReport:
        """The host's capacity, what is reserved and free, who waits, and this tenant's use and quota."""
        return self._run(_ops.capacity())

    def step_many(
        self,
        steps: Iterable[tuple[Sandbox | str, Action | Mapping[str, Any] | str]],
        *,
        screenshot: bool = False,
    ) -> builtins.list[Observation | SandboxError]:
        """A step in each of many sandboxes, all at once, in one call (a vectorized environment's step):
        ``steps`` pairs a sandbox (or its id) with its action, one step a sandbox, at most 1024. The answers come in
        the steps' order, each the step's observation or its error, returned, not raised (like ``asyncio.gather``'s
        ``return_exceptions``): one sandbox failing fails no other. A malformed batch raises InvalidArgument before
        any step is done."""
        pairs = [(sb.id if isinstance(sb, Sandbox) else sb, action) for sb, action in steps]
        return self._run(_ops.step_many(pairs, screenshot=screenshot))

    def get(self, sandbox_id: str) -> Sandbox:
        """A handle on an existing sandbox (closing it deletes the sandbox)."""
        return Sandbox(self, self._run(_ops.get(sandbox_id)))

    def list(self) -> builtins.list[SandboxInfo]:
        """The sandboxes this caller may see."""
        return self._run(_ops.list_sandboxes())

    def snapshots(self) -> builtins.list[SnapshotInfo]:
        """The snapshots this caller may see (``Sandbox.snapshot`` takes one)."""
        return self._run(_ops.list_snapshots())

    def delete_snapshot(self, name: str) -> None:
        """Delete one of the caller's snapshots (sandboxes started from it keep running)."""
        self._run(_ops.delete_snapshot(name))

    def close(self) -> None:
        """Close the connection; sandboxes keep running."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sandbox:
    """One sandbox. ``with client.create(kind="terminal") as sb:`` deletes it at the end."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self._client = client
        self.info = info
        self.files = Files(self)
        self._closed = False

    @property
    def id(self) -> str:
        return self.info.id

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, kind={self.info.kind.value!r})"

    def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        """Do one action (a model or a dict such as ``{"type": "click", "x": 10, "y": 20}``; or OSWorld's output as
        it is: pyautogui code, ``"WAIT"``, ``"DONE"``, ``"FAIL"``). In an episode, ``done`` and ``info`` say where it
        stands (``info``: steps, truncated, reason, task_id, trajectory_id)."""
        return self._client._run(_ops.step(self.id, action, screenshot=screenshot))

    def _open_lane(self) -> LaneInfo:
        """A direct lane's grant (``OpenLane``): what the lane asks for when it needs one."""
        return self._client._run(_ops.open_lane(self.id))

    def lane(self) -> Lane:
        """Steps over a direct lane to the sandbox's agent, the control plane out of the path (docs/lanes.md):
        ``with sb.lane() as lane:``. What a lane does not carry (an episode's steps among them) goes through the
        control plane, with the same result."""
        return Lane(self)

    def step_stream(self) -> StepStream:
        """Steps over one bidirectional stream, for the lowest latency: ``with sb.step_stream() as s: s.step(a)``."""
        return StepStream(self)

    def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        """The current screen (display kinds) and page (browser) without acting."""
        return self._client._run(_ops.observe(self.id, format=format, quality=quality))

    def exec(
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
        return self._client._run(op)

    @overload
    def reset(self, snapshot: str | None = None) -> SandboxInfo: ...

    @overload
    def reset(self, snapshot: str | None = None, *, task: TaskLike, record: bool = False) -> Observation: ...

    def reset(
        self, snapshot: str | None = None, *, task: TaskLike | None = None, record: bool = False
    ) -> SandboxInfo | Observation:
        """Back to the initial state (a fresh sandbox from the same spec, or from the snapshot named here,
        which the sandbox keeps from then on); the refreshed info.

        With ``task`` (a ``Task``, its dict, or the path of its JSON file): the start of an episode of it — its
        setup run, or its post-setup snapshot swapped in — and the episode's first observation. The files its
        ``download`` steps fetch are sent along from its fixtures (those beside its file). ``record`` (android
        sandboxes): the episode's screen is recorded into its trajectory (``trajectories.media``)."""
        self.info, obs = self._client._run(_episodes.reset(self.id, snapshot=snapshot, task=task, record=record))
        return self.info if obs is None else obs

    def evaluate(self) -> float:
        """Score the episode (since the last reset to a task) with the task's evaluator: the reward in [0, 1]."""
        return self._client._run(_episodes.evaluate(self.id))

    def renew(self, ttl_s: float | None = None) -> SandboxInfo:
        """Extend the lease: the sandbox now expires ``ttl_s`` (default: its spec's ttl_s) from now."""
        self.info = self._client._run(_ops.renew(self.id, ttl_s=ttl_s))
        return self.info

    def snapshot(self, name: str, *, warm: int = 0) -> SnapshotInfo:
        """Keep the file system (and a desktop's GUI apps) as snapshot ``name`` of the caller's, to create or
        reset sandboxes from (``client.create(kind, snapshot=name)``, ``reset(snapshot=name)``); ``warm``
        replicas are kept running so that a reset to it takes no start."""
        return self._client._run(_ops.snapshot(self.id, name, warm=warm))

    def refresh(self) -> SandboxInfo:
        """The sandbox's current info (state, last activity)."""
        self.info = self._client._run(_ops.get(self.id))
        return self.info

    def url(self, port: int, *, ttl: float | None = None, full_path: bool = False) -> str:
        """A URL that opens ``port`` inside the sandbox (HTTP and websockets, proxied by the control plane's HTTP
        server; docs/preview.md). It carries a ticket for that port only, valid ``ttl`` seconds (default 300, at
        most 86400) and traded for a cookie on first use. Ports 1024-65535, not the platform's own. ``full_path``:
        the ``/v1/sandboxes/{id}/apps/{port}/`` form, whose app gets the whole path (tell it that path as its base
        path, e.g. Jupyter's ``base_url``); else ``/ports/{port}/``, the prefix stripped."""
        return self._client._run(_ops.preview_url(self.id, port, ttl_s=ttl, full_path=full_path))

    def health(self) -> Health:
        return self._client._run(_ops.health(self.id))

    def logs(self, tail: int = 200) -> str:
        return self._client._run(_ops.logs(self.id, tail=tail))

    def close(self) -> None:
        """Delete the sandbox. Idempotent; a sandbox already gone is not an error."""
        if not self._closed:
            self._client._run(_ops.delete(self.id, missing_ok=True))
            self._closed = True

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Files:
    """The sandbox's file system (relative paths are relative to /workspace)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def read(self, path: str, *, offset: int = 0, length: int | None = None) -> bytes:
        return self._sandbox._client._run(_ops.read_file(self._sandbox.id, path, offset=offset, length=length))

    def write(self, path: str, data: bytes | str, *, mode: int = 0o644, append: bool = False) -> int:
        """Write (or append) ``data`` (str is UTF-8); the file's size afterwards."""
        return self._sandbox._client._run(_ops.write_file(self._sandbox.id, path, data, mode=mode, append=append))

    def list(self, path: str = "/workspace") -> builtins.list[FileInfo]:
        return self._sandbox._client._run(_ops.list_files(self._sandbox.id, path))

    def delete(self, path: str, recursive: bool = False) -> None:
        self._sandbox._client._run(_ops.delete_file(self._sandbox.id, path, recursive=recursive))

    def upload(self, local_path: str | os.PathLike[str], remote_path: str) -> int:
        """Copy a local file in; the number of bytes copied."""
        return self._sandbox._client._run(_ops.upload(self._sandbox.id, local_path, remote_path))

    def download(self, remote_path: str, local_path: str | os.PathLike[str]) -> int:
        """Copy a file out; the number of bytes copied."""
        return self._sandbox._client._run(_ops.download(self._sandbox.id, remote_path, local_path))


class Trajectories:
    """The recorded episodes this caller may see (every tenant's for an admin)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self, *, task_id: str | None = None) -> builtins.list[TrajectoryInfo]:
        """Their summaries, of ``task_id`` if given, oldest first."""
        return self._client._run(_episodes.list_trajectories(task_id=task_id))

    def get(self, trajectory_id: str) -> Trajectory:
        """A trajectory with its steps (frames by hash: ``frame``)."""
        return self._client._run(_episodes.get_trajectory(trajectory_id))

    def frame(self, trajectory_id: str, sha256: str) -> Screenshot:
        """One screenshot of a trajectory, by the hash its steps name (``step.frame.sha256``)."""
        return self._client._run(_episodes.trajectory_frame(trajectory_id, sha256))

    def media(self, trajectory_id: str, sha256: str) -> bytes:
        """A medium kept with a trajectory (a screen recording: ``info.media[].sha256``), its bytes."""
        return self._client._run(_episodes.trajectory_media(trajectory_id, sha256))

    def delete(self, trajectory_id: str) -> None:
        self._client._run(_episodes.delete_trajectory(trajectory_id))


class StepStream:
    """Steps over one ``StepStream`` RPC: no per-call setup, one response per step, in order.

    A failed step raises its error and the stream goes on. Close it (or use ``with``) when done.
    """

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self._requests: queue.SimpleQueue[pb.StepRequest | None] = queue.SimpleQueue()
        self._responses: Any = None

    @staticmethod
    def _pending(requests: queue.SimpleQueue[pb.StepRequest | None]) -> Iterator[pb.StepRequest]:
        while (request := requests.get()) is not None:
            yield request

    def step(self, action: Action | Mapping[str, Any] | str, *, screenshot: bool = False) -> Observation:
        return self._exchange(_ops.step_request(self._sandbox.id, action, screenshot=screenshot))

    def observe(self, *, format: str = "png", quality: int = 80) -> Observation:
        """As ``Sandbox.observe``, on this stream."""
        return self._exchange(_ops.observe_step_request(self._sandbox.id, format=format, quality=quality))

    def _exchange(self, request: pb.StepRequest) -> Observation:
        client = self._sandbox._client
        if self._responses is None or self._responses.done():  # never opened, or ended (a server gone meanwhile)
            self._drop()
            self._requests = queue.SimpleQueue()  # each stream its own: nothing meant for an old one is sent
            self._responses = client._stub.StepStream(self._pending(self._requests), metadata=client._metadata)
        self._requests.put(request)
        try:
            reply = next(self._responses)
        except BaseException as e:
            # Failed or interrupted midway: which replies are still to come is unknown, so this stream is done.
            self._drop()
            if isinstance(e, StopIteration):
                raise Unavailable("the step stream ended before answering") from None
            if isinstance(e, grpc.RpcError):
                raise rpc_error(e, client.target, method="StepStream", timeout=None) from e
            raise
        return _ops.step_result(reply)

    def _drop(self) -> None:
        responses, self._responses = self._responses, None
        if responses is not None:
            self._requests.put(None)
            responses.cancel()

    def close(self) -> None:
        """End the stream (the server finishes the steps it has)."""
        responses, self._responses = self._responses, None
        if responses is not None:
            self._requests.put(None)
            try:
                for _ in responses:
                    pass
            except grpc.RpcError:
                pass

    def __enter__(self) -> StepStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
