"""What every SDK call does, written once, with no I/O of its own ("sans-I/O").

Each operation is a generator: it validates its arguments with the models, ``yield``s the
effects it needs — a :class:`Call` (one unary RPC) or a :class:`Local` (blocking work on a
local file) — receives each effect's result back, and ``return``s the call's result. A
failed RPC is thrown into the generator as the platform's exception (:mod:`sandbox.client._errors` says how).

Two small drivers run these generators: :func:`drive` over a blocking gRPC channel (the sync
:class:`~sandbox.client.Client`) and :func:`drive_async` over a ``grpc.aio`` channel (the
:class:`~sandbox.client.AsyncClient`, which also moves :class:`Local` work off the event
loop). So request building, chunking, deadlines and error handling exist once, and the two
clients are only thin, same-signature shells that hand an operation to their driver.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from sandbox import environment, models
from sandbox.capacity.report import CapacityReport, WaitingCall
from sandbox.errors import InternalError, InvalidArgument, NotFound, SandboxError
from sandbox.models.preview import UrlRequest
from sandbox.models.step_batch import check_step_batch
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.limits import MESSAGE_SIZE_OPTIONS, call_deadline
from sandbox.wire.status import from_grpc, grpc_status_of_number

T = TypeVar("T")

CHUNK_BYTES = 16 * 1024 * 1024
"""File data moves in pieces of this size, well under the message limit (``sandbox.wire.limits.MAX_MESSAGE_BYTES``)."""

SNAPSHOT_DEADLINE_S = 600.0
"""The least deadline of taking a snapshot: the engine copies the sandbox's whole file system."""

CHANNEL_OPTIONS = MESSAGE_SIZE_OPTIONS


@dataclass(frozen=True)
class Call:
    """One unary RPC: the stub's method name, its request, and the least deadline it needs."""

    method: str
    request: Any
    min_timeout: float = 0.0


@dataclass(frozen=True)
class Local:
    """Blocking local work (a piece of a local file); the async driver runs it in a thread."""

    fn: Callable[[], Any]


Effect = Call | Local
Op = Generator[Effect, Any, T]


def metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


DEFAULT_TARGET = "127.0.0.1:50051"
"""Where ``make run`` serves gRPC."""


def target_or_default(target: str | None) -> str:
    """The address a client connects to: the one given, else SANDBOX_TARGET (as the CLI reads it), else
    :data:`DEFAULT_TARGET`."""
    return target or environment.target() or DEFAULT_TARGET


def deadline(call: Call, timeout: float) -> float:
    return max(timeout, call.min_timeout)


# --------------------------------------------------------------------------- drivers


def _bad_reply(error: ValidationError) -> InternalError:
    # Requests are validated before any I/O, so a ValidationError here comes from a reply.
    return InternalError(f"the server sent a reply the SDK cannot read: {convert.describe_validation_error(error)}")


def drive(op: Op[T], perform: Callable[[Effect], Any]) -> T:
    """Run ``op`` to its result, performing each effect with the blocking ``perform``."""
    try:
        effect = next(op)
        while True:
            try:
                result = perform(effect)
            except Exception as e:  # the operation may handle it (e.g. NotFound), else it comes back out
                effect = op.throw(e)
            else:
                effect = op.send(result)
    except StopIteration as done:
        value: T = done.value
        return value
    except ValidationError as e:
        raise _bad_reply(e) from e


async def drive_async(op: Op[T], perform: Callable[[Call], Awaitable[Any]]) -> T:
    """Run ``op`` to its result, awaiting RPCs with ``perform`` and running local work in a thread."""
    try:
        effect = next(op)
        while True:
            try:
                if isinstance(effect, Local):
                    result = await asyncio.to_thread(effect.fn)
                else:
                    result = await perform(effect)
            except Exception as e:  # the operation may handle it (e.g. NotFound), else it comes back out
                effect = op.throw(e)
            else:
                effect = op.send(result)
    except StopIteration as done:
        value: T = done.value
        return value
    except ValidationError as e:
        raise _bad_reply(e) from e


# --------------------------------------------------------------------------- sandboxes


def full_spec(kind: str, spec: Mapping[str, Any]) -> models.SandboxSpec:
    """The spec a create asks for, validated here (a bad field fails before any I/O, naming it)."""
    return convert.validate(models.SandboxSpec, {**spec, "kind": kind}, what="spec")


def create_each(count: int, spec: models.SandboxSpec) -> Op[list[models.SandboxInfo | SandboxError]]:
    """``count`` sandboxes of ``spec``, each admitted and made on its own (``CreateSandboxes`` with ``each``): each
    one's sandbox or error, in order."""
    request = pb.CreateSandboxesRequest(spec=convert.spec_to_proto(spec), count=count, each=True)
    reply = yield Call("CreateSandboxes", request, min_timeout=CREATE_TIMEOUT_S)
    if not reply.outcomes and len(reply.sandboxes) == count:  # a server from before `each`: made as a group
        return [convert.info_from_proto(info) for info in reply.sandboxes]
    if len(reply.outcomes) != count:
        raise InternalError(f"the server answered {len(reply.outcomes)} creates of {count}")
    return [_made(outcome) for outcome in reply.outcomes]


def _made(outcome: pb.CreateOutcome) -> models.SandboxInfo | SandboxError:
    if outcome.WhichOneof("result") == "error":
        return _error_of(outcome.error)
    return convert.info_from_proto(outcome.sandbox)


def _error_of(error: pb.StepError) -> SandboxError:
    """The exception an item's error in a batch or stream answer stands for."""
    return from_grpc(grpc_status_of_number(error.code), error.message)


def create(kind: str, spec: Mapping[str, Any], *, wait_s: float = 0.0) -> Op[models.SandboxInfo]:
    return create_spec(full_spec(kind, spec), wait_s=wait_s)


def create_spec(full: models.SandboxSpec, *, wait_s: float = 0.0) -> Op[models.SandboxInfo]:
    request = pb.CreateSandboxRequest(spec=convert.spec_to_proto(full), wait_s=_wait(wait_s))
    reply = yield Call("CreateSandbox", request, min_timeout=wait_s + CREATE_TIMEOUT_S)
    return convert.info_from_proto(reply)


def create_group(
    count: int, kind: str, spec: Mapping[str, Any], *, wait_s: float = 0.0
) -> Op[list[models.SandboxInfo]]:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= models.GROUP_MAX:
        raise InvalidArgument(f"count must be an integer from 1 to {models.GROUP_MAX}, not {count!r}")
    full = convert.validate(models.SandboxSpec, {**spec, "kind": kind}, what="spec")
    request = pb.CreateSandboxesRequest(spec=convert.spec_to_proto(full), count=count, wait_s=_wait(wait_s))
    reply = yield Call("CreateSandboxes", request, min_timeout=wait_s + CREATE_TIMEOUT_S)
    return [convert.info_from_proto(info) for info in reply.sandboxes]


CREATE_TIMEOUT_S = 120.0
"""The least deadline of a create beyond its wait for capacity: a cold desktop start with room to spare."""


def _wait(wait_s: float) -> float:
    if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not 0 <= wait_s <= 86_400:
        raise InvalidArgument(f"wait_s must be a number of seconds from 0 to 86400, not {wait_s!r}")
    return float(wait_s)


def waiting() -> Op[list[WaitingCall]]:
    reply = yield Call("ListSandboxes", pb.ListSandboxesRequest())
    fields = ("ticket", "tenant", "kind", "count", "position", "waited_s", "gives_up_in_s")
    return [WaitingCall.model_validate({f: getattr(w, f) for f in fields}) for w in reply.waiting]


def capacity() -> Op[CapacityReport]:
    reply = yield Call("GetCapacity", pb.GetCapacityRequest())
    return CapacityReport.model_validate_json(reply.json)


def get(sandbox_id: str) -> Op[models.SandboxInfo]:
    reply = yield Call("GetSandbox", pb.GetSandboxRequest(sandbox_id=sandbox_id))
    return convert.info_from_proto(reply)


def list_sandboxes() -> Op[list[models.SandboxInfo]]:
    reply = yield Call("ListSandboxes", pb.ListSandboxesRequest())
    return [convert.info_from_proto(i) for i in reply.sandboxes]


def delete(sandbox_id: str, *, missing_ok: bool = False) -> Op[None]:
    try:
        yield Call("DeleteSandbox", pb.DeleteSandboxRequest(sandbox_id=sandbox_id))
    except NotFound:
        if not missing_ok:
            raise


def renew(sandbox_id: str, *, ttl_s: float | None = None) -> Op[models.SandboxInfo]:
    renewal = convert.validate(convert.Renewal, {"ttl_s": ttl_s}, what="renewal")
    request = pb.RenewRequest(sandbox_id=sandbox_id)
    if renewal.ttl_s is not None:
        request.ttl_s = renewal.ttl_s
    reply = yield Call("Renew", request)
    return convert.info_from_proto(reply)


# --------------------------------------------------------------------------- snapshots


def snapshot(sandbox_id: str, name: str, *, warm: int = 0) -> Op[models.SnapshotInfo]:
    request = pb.CreateSnapshotRequest(sandbox_id=sandbox_id, name=name, warm=warm)
    reply = yield Call("CreateSnapshot", request, min_timeout=SNAPSHOT_DEADLINE_S)
    return convert.snapshot_from_proto(reply)


def list_snapshots() -> Op[list[models.SnapshotInfo]]:
    reply = yield Call("ListSnapshots", pb.ListSnapshotsRequest())
    return [convert.snapshot_from_proto(s) for s in reply.snapshots]


def delete_snapshot(name: str) -> Op[None]:
    yield Call("DeleteSnapshot", pb.DeleteSnapshotRequest(name=name))


# --------------------------------------------------------------------------- acting


def _action_budget(action: models.Action) -> float:
    """The least deadline of acting: past an exec's or navigation's timeout, or a wait (``call_deadline``)."""
    if isinstance(action, models.Exec | models.Navigate | models.PageOpen):
        return call_deadline(action.timeout)
    if isinstance(action, models.Wait):
        return call_deadline(action.seconds)
    return 0.0


def step_request(
    sandbox_id: str, action: models.Action | Mapping[str, Any] | str, *, screenshot: bool
) -> pb.StepRequest:
    """Validates ``action`` here, before it goes anywhere: bad input fails fast, naming the field."""
    return checked_step(sandbox_id, action, screenshot=screenshot)[0]


def checked_step(
    sandbox_id: str, action: models.Action | Mapping[str, Any] | str, *, screenshot: bool
) -> tuple[pb.StepRequest, float]:
    """The request for ``action`` (validated first) and the least deadline the step needs."""
    checked = convert.validate_action(action)
    request = pb.StepRequest(sandbox_id=sandbox_id, action=convert.action_to_proto(checked), screenshot=screenshot)
    return request, _action_budget(checked)


def step_result(reply: pb.StepResponse) -> models.Observation:
    if reply.WhichOneof("result") == "error":
        raise _error_of(reply.error)
    return convert.observation_from_proto(reply.observation)


def step(
    sandbox_id: str, action: models.Action | Mapping[str, Any] | str, *, screenshot: bool
) -> Op[models.Observation]:
    request, budget = checked_step(sandbox_id, action, screenshot=screenshot)
    reply = yield Call("Step", request, min_timeout=budget)
    return step_result(reply)


def step_many(
    steps: Sequence[tuple[str, models.Action | Mapping[str, Any] | str]], *, screenshot: bool
) -> Op[list[models.Observation | SandboxError]]:
    check_step_batch([sandbox_id for sandbox_id, _ in steps])
    checked = []
    for i, (sandbox_id, action) in enumerate(steps):
        try:
            checked.append(checked_step(sandbox_id, action, screenshot=screenshot))
        except InvalidArgument as e:
            raise InvalidArgument(f"steps[{i}]: {e.message}") from e
    request = pb.StepManyRequest(steps=[step for step, _ in checked])
    reply = yield Call("StepMany", request, min_timeout=max((budget for _, budget in checked), default=0.0))
    if len(reply.results) != len(steps):
        raise InternalError(f"the server answered {len(reply.results)} steps of a batch of {len(steps)}")
    return [_outcome(result) for result in reply.results]


def _outcome(reply: pb.StepResponse) -> models.Observation | SandboxError:
    try:
        return step_result(reply)
    except SandboxError as e:
        return e


def observe_step_request(sandbox_id: str, *, format: str, quality: int) -> pb.StepRequest:
    """An observe sent as a step (on a step stream)."""
    return pb.StepRequest(sandbox_id=sandbox_id, observe=pb.ObserveOptions(format=format, quality=quality))


def observe(sandbox_id: str, *, format: str, quality: int) -> Op[models.Observation]:
    reply = yield Call("Observe", pb.ObserveRequest(sandbox_id=sandbox_id, format=format, quality=quality))
    return convert.observation_from_proto(reply)


def exec_(
    sandbox_id: str,
    cmd: str | Sequence[str],
    *,
    timeout: float,
    cwd: str | None,
    env: Mapping[str, str] | None,
    session: str | None,
    keep_background: bool,
) -> Op[models.ExecResult]:
    fields = {
        "cmd": cmd if isinstance(cmd, str) else list(cmd),
        "timeout": timeout,
        "cwd": cwd,
        "env": dict(env or {}),
        "session": session,
        "keep_background": keep_background,
    }
    request = convert.validate(models.Exec, fields, what="exec")
    reply = yield Call(
        "Exec",
        pb.ExecRequest(sandbox_id=sandbox_id, exec=convert.exec_to_proto(request)),
        min_timeout=call_deadline(request.timeout),
    )
    return convert.exec_result_from_proto(reply)


# --------------------------------------------------------------------------- files


def read_file(sandbox_id: str, path: str, *, offset: int = 0, length: int | None = None) -> Op[bytes]:
    """The file's bytes from ``offset`` (to the end when ``length`` is None), a chunk per RPC."""
    pieces: list[bytes] = []
    remaining = length
    while remaining is None or remaining > 0:
        want = CHUNK_BYTES if remaining is None else min(CHUNK_BYTES, remaining)
        reply = yield Call("ReadFile", pb.ReadFileRequest(sandbox_id=sandbox_id, path=path, offset=offset, length=want))
        pieces.append(reply.data)
        offset += len(reply.data)
        if remaining is not None:
            remaining -= len(reply.data)
        if len(reply.data) < want:
            break
    return b"".join(pieces)


def write_file(
    sandbox_id: str, path: str, data: bytes | str, *, mode: int | None = None, append: bool = False
) -> Op[int]:
    """Write ``data`` a chunk per RPC (a file larger than one chunk is not replaced atomically)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    size, start = 0, 0
    while True:
        piece = raw[start : start + CHUNK_BYTES]
        request = pb.WriteFileRequest(sandbox_id=sandbox_id, path=path, data=piece, append=append or start > 0)
        if mode is not None:
            request.mode = mode
        size = (yield Call("WriteFile", request)).size
        start += len(piece)
        if start >= len(raw):
            return int(size)


def list_files(sandbox_id: str, path: str) -> Op[list[models.FileInfo]]:
    reply = yield Call("ListFiles", pb.ListFilesRequest(sandbox_id=sandbox_id, path=path))
    return [convert.file_info_from_proto(f) for f in reply.files]


def delete_file(sandbox_id: str, path: str, *, recursive: bool) -> Op[None]:
    yield Call("DeleteFile", pb.DeleteFileRequest(sandbox_id=sandbox_id, path=path, recursive=recursive))


def _read_local(path: str | os.PathLike[str], offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def _write_local(path: str | os.PathLike[str], data: bytes, *, append: bool) -> None:
    with open(path, "ab" if append else "wb") as f:
        f.write(data)


def upload(sandbox_id: str, local_path: str | os.PathLike[str], remote_path: str) -> Op[int]:
    """Copy a local file into the sandbox a chunk at a time; the number of bytes copied."""
    offset = 0
    while True:
        piece: bytes = yield Local(functools.partial(_read_local, local_path, offset, CHUNK_BYTES))
        request = pb.WriteFileRequest(sandbox_id=sandbox_id, path=remote_path, data=piece, append=offset > 0)
        yield Call("WriteFile", request)
        offset += len(piece)
        if len(piece) < CHUNK_BYTES:
            return offset


def download(sandbox_id: str, remote_path: str, local_path: str | os.PathLike[str]) -> Op[int]:
    """Copy a file out of the sandbox a chunk at a time; the number of bytes copied."""
    offset = 0
    while True:
        request = pb.ReadFileRequest(sandbox_id=sandbox_id, path=remote_path, offset=offset, length=CHUNK_BYTES)
        piece: bytes = (yield Call("ReadFile", request)).data
        yield Local(functools.partial(_write_local, local_path, piece, append=offset > 0))
        offset += len(piece)
        if len(piece) < CHUNK_BYTES:
            return offset


# --------------------------------------------------------------------------- inspection


def health(sandbox_id: str) -> Op[models.Health]:
    reply = yield Call("Health", pb.HealthRequest(sandbox_id=sandbox_id))
    return convert.health_from_proto(reply)


def logs(sandbox_id: str, *, tail: int) -> Op[str]:
    reply = yield Call("Logs", pb.LogsRequest(sandbox_id=sandbox_id, tail=tail))
    return str(reply.text)


# --------------------------------------------------------------------------- previews


def preview_url(sandbox_id: str, port: int, *, ttl_s: float | None, full_path: bool = False) -> Op[str]:
    """The preview URL of ``port`` (its ticket in the query), on the control plane's public HTTP address."""
    data = {"port": port, "ttl_s": ttl_s, "full_path": full_path}
    wanted = convert.validate(UrlRequest, data, what="preview URL request")
    reply = yield Call("PreviewUrl", convert.url_request_to_proto(sandbox_id, wanted))
    return convert.port_url_from_proto(reply).url


def open_lane(sandbox_id: str) -> Op[models.LaneInfo]:
    """A direct lane to the sandbox's agent (docs/lanes.md): its address, ticket, lifetime and actions."""
    reply = yield Call("OpenLane", pb.OpenLaneRequest(sandbox_id=sandbox_id))
    return convert.lane_from_proto(reply)
