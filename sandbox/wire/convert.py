"""Proto messages ↔ models, shared by the gRPC server (``sandbox.api``) and the SDK (``sandbox.client``).

The proto mirrors the models field for field (``tests/unit/wire/test_proto_sync.py`` keeps them
so), which lets one generic walk over the message descriptors do nearly all the work:

- model → proto: ``model_dump()`` and set every field that is not ``None``;
- proto → model: collect the fields that are *set* (``optional`` fields and messages only
  when present, plain scalars always) and let the model validate them, so an unset field
  takes the model's default and the model's limits are the only limits.

Enums travel as proto enums named ``<ENUM>_<VALUE>`` (``SANDBOX_KIND_TERMINAL``); value 0
(``*_UNSPECIFIED``) means "unset". A few shapes differ from the model and are handled by
hand: ``Exec.cmd`` (a oneof of a shell string and an argv list), ``Observation.value`` and
``Observation.info`` (JSON text), ``Observation.cursor`` (a ``Point``) and
``SandboxSpec.idle_timeout_s`` (an ``IdleTimeout``: seconds or ``never``, since the model's
``None`` means "no idle timeout" there, not "the default").

Converting a *request* raises :class:`~sandbox.errors.InvalidArgument` naming the bad field.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator

from sandbox import models
from sandbox.errors import InvalidArgument
from sandbox.memo import IdentityMemo, Memo
from sandbox.models.preview import PortUrl, UrlRequest
from sandbox.wire.grpc_gen import sandbox_pb2 as pb

M = TypeVar("M", bound=BaseModel)

_specs: Memo[bytes, models.SandboxSpec] = Memo()
"""Validated specs by their messages' bytes."""
_spec_messages: IdentityMemo[models.SandboxSpec, pb.SandboxSpec] = IdentityMemo()
"""Specs' wire forms (copied out, never handed out: messages are mutable)."""

ACTION_ADAPTER: TypeAdapter[models.Action] = TypeAdapter(models.Action)
ACTION_TYPES: tuple[type[BaseModel], ...] = typing.get_args(typing.get_args(models.Action)[0])
"""Every member of the ``models.Action`` union."""

# --------------------------------------------------------------------------- validation errors


def describe_validation_error(error: ValidationError) -> str:
    """``"click.x: Input should be greater than or equal to 0; ..."``: each problem with its field."""
    parts = []
    for problem in error.errors(include_url=False):
        where = ".".join(str(p) for p in problem["loc"])
        if not where and problem["type"] in ("union_tag_invalid", "union_tag_not_found"):
            where = "type"  # the union's discriminator, which pydantic reports without a location
        parts.append(f"{where}: {problem['msg']}" if where else problem["msg"])
    return "; ".join(parts)


def invalid(error: ValidationError, *, what: str) -> InvalidArgument:
    return InvalidArgument(f"invalid {what}: {describe_validation_error(error)}")


def validate(model: type[M], data: Mapping[str, Any], *, what: str) -> M:
    """``model`` from request data, or :class:`InvalidArgument` naming the bad field."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise invalid(e, what=what) from e


def validate_action(action: models.Action | Mapping[str, Any] | str) -> models.Action:
    """An action model as it is, or a plain dict such as ``{"type": "click", "x": 1, "y": 2}`` (or OSWorld's
    output: pyautogui code, ``"WAIT"``, ``"DONE"``, ``"FAIL"``) validated."""
    if isinstance(action, BaseModel):
        if not isinstance(action, ACTION_TYPES):
            raise InvalidArgument(f"invalid action: {type(action).__name__} is not an action model")
        return typing.cast(models.Action, action)
    try:
        return ACTION_ADAPTER.validate_python(action)
    except ValidationError as e:
        raise invalid(e, what="action") from e


# --------------------------------------------------------------------------- the generic walk


def _is_map(field: FieldDescriptor) -> bool:
    return bool(
        field.type == FieldDescriptor.TYPE_MESSAGE and field.is_repeated and field.message_type.GetOptions().map_entry
    )


def enum_prefix(enum: EnumDescriptor) -> str:
    """``SandboxKind`` → ``SANDBOX_KIND_``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", enum.name).upper() + "_"


class _Enum(NamedTuple):
    """An enum's values both ways: proto number → model value, model value's upper case → proto number."""

    to_model: dict[int, str]
    to_proto: dict[str, int]


_enums: dict[str, _Enum] = {}


def _enum(enum: EnumDescriptor) -> _Enum:
    found = _enums.get(enum.full_name)
    if found is None:
        prefix = enum_prefix(enum)
        found = _enums[enum.full_name] = _Enum(
            {v.number: v.name.removeprefix(prefix).lower() for v in enum.values},
            {v.name.removeprefix(prefix): v.number for v in enum.values if v.name.startswith(prefix)},
        )
    return found


def _enum_to_model(enum: EnumDescriptor, number: int) -> Any:
    value = _enum(enum).to_model.get(number)
    if value is None:
        return number  # a value this build does not know: let the model reject it by name
    return value


def _enum_to_proto(enum: EnumDescriptor, value: Any) -> int:
    return _enum(enum).to_proto[str(value).upper()]


_UNSET = object()

# What a field is, for the walk (worked out once per message type: ``_fields``).
_SCALAR, _MESSAGE, _ENUM = 0, 1, 2
_SINGLE, _REPEATED, _MAP = 0, 1, 2


class _Field(NamedTuple):
    name: str
    shape: int
    """_SINGLE, _REPEATED or _MAP."""
    kind: int
    """Of the value (a map's: of its values): _SCALAR, _MESSAGE or _ENUM."""
    presence: bool
    enum: EnumDescriptor | None


def _kind(field: FieldDescriptor) -> int:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _MESSAGE
    return _ENUM if field.type == FieldDescriptor.TYPE_ENUM else _SCALAR


def _field(field: FieldDescriptor) -> _Field:
    if _is_map(field):
        value = field.message_type.fields_by_name["value"]
        return _Field(field.name, _MAP, _kind(value), False, value.enum_type)
    shape = _REPEATED if field.is_repeated else _SINGLE
    return _Field(field.name, shape, _kind(field), bool(field.has_presence), field.enum_type)


_plans: dict[str, tuple[tuple[_Field, ...], dict[str, _Field]]] = {}


def _fields(descriptor: Descriptor) -> tuple[tuple[_Field, ...], dict[str, _Field]]:
    """A message type's fields, in order and by name."""
    plan = _plans.get(descriptor.full_name)
    if plan is None:
        fields = tuple(_field(f) for f in descriptor.fields)
        plan = _plans[descriptor.full_name] = (fields, {f.name: f for f in fields})
    return plan


def _scalar_to_model(field: _Field, value: Any) -> Any:
    if field.kind == _MESSAGE:
        return to_dict(value)
    if field.kind == _ENUM:
        assert field.enum is not None
        return _UNSET if value == 0 else _enum_to_model(field.enum, value)
    return value


def to_dict(message: Message) -> dict[str, Any]:
    """The fields of ``message`` that are set, as model input."""
    out: dict[str, Any] = {}
    for field in _fields(message.DESCRIPTOR)[0]:
        name = field.name
        if field.presence and not message.HasField(name):
            continue
        value = getattr(message, name)
        if field.shape == _MAP:
            out[name] = {k: _scalar_to_model(field, v) for k, v in value.items()}
        elif field.shape == _REPEATED:
            out[name] = [_scalar_to_model(field, v) for v in value]
        elif field.kind == _SCALAR:
            out[name] = value
        else:
            converted = _scalar_to_model(field, value)
            if converted is not _UNSET:
                out[name] = converted
    return out


def fill(message: Message, data: Mapping[str, Any]) -> Message:
    """Set the fields of ``message`` from model output (``model_dump()``); ``None`` stays unset."""
    message.SetInParent()
    fields = _fields(message.DESCRIPTOR)[1]
    for name, value in data.items():
        if value is None:
            continue
        field = fields[name]
        if field.shape == _MAP:
            target = getattr(message, name)
            for key, item in value.items():
                if field.kind == _MESSAGE:
                    fill(target[key], item)
                else:
                    target[key] = item
        elif field.shape == _REPEATED:
            target = getattr(message, name)
            for item in value:
                if field.kind == _MESSAGE:
                    fill(target.add(), item)
                elif field.kind == _ENUM:
                    assert field.enum is not None
                    target.append(_enum_to_proto(field.enum, item))
                else:
                    target.append(item)
        elif field.kind == _MESSAGE:
            fill(getattr(message, name), value)
        elif field.kind == _ENUM:
            assert field.enum is not None
            setattr(message, name, _enum_to_proto(field.enum, value))
        else:
            setattr(message, name, value)
    return message


def _from_model(message: Message, model: BaseModel) -> Any:
    return fill(message, model.model_dump(exclude_none=True))


# --------------------------------------------------------------------------- sandboxes


def _fill_spec(message: pb.SandboxSpec, spec: models.SandboxSpec) -> pb.SandboxSpec:
    fill(message, spec.model_dump(exclude_none=True, exclude={"idle_timeout_s"}))
    if spec.idle_timeout_s is None:
        message.idle_timeout_s.never = True
    else:
        message.idle_timeout_s.seconds = spec.idle_timeout_s
    return message


def _spec_dict(message: pb.SandboxSpec) -> dict[str, Any]:
    """Model input from a spec: an unset ``idle_timeout_s`` takes the default, ``never`` is ``None``."""
    data = to_dict(message)
    data.pop("idle_timeout_s", None)
    if message.HasField("idle_timeout_s"):
        idle = message.idle_timeout_s
        which = idle.WhichOneof("timeout")
        if which == "seconds":
            data["idle_timeout_s"] = idle.seconds
        elif which == "never" and idle.never:
            data["idle_timeout_s"] = None
        else:
            raise InvalidArgument(
                "invalid spec: idle_timeout_s: set either seconds or never=true (leave it unset for the default)"
            )
    return data


def spec_to_proto(spec: models.SandboxSpec) -> pb.SandboxSpec:
    message = pb.SandboxSpec()
    message.CopyFrom(_spec_message(spec))
    return message


def _spec_message(spec: models.SandboxSpec) -> pb.SandboxSpec:
    """The spec's wire form, made once per spec object: copy it, never hand it out (messages are mutable)."""
    return _spec_messages.get(spec, lambda: _fill_spec(pb.SandboxSpec(), spec))


def spec_from_proto(message: pb.SandboxSpec) -> models.SandboxSpec:
    """The validated spec; the same (frozen) model for the same message, so a burst of creates validates once."""
    return _specs.get(
        message.SerializeToString(deterministic=True),
        lambda: validate(models.SandboxSpec, _spec_dict(message), what="spec"),
    )


def info_to_proto(info: models.SandboxInfo) -> pb.SandboxInfo:
    message = pb.SandboxInfo()
    fill(message, info.model_dump(exclude_none=True, exclude={"spec"}))
    message.spec.CopyFrom(_spec_message(info.spec))
    return message


def info_from_proto(message: pb.SandboxInfo) -> models.SandboxInfo:
    return models.SandboxInfo.model_validate({**to_dict(message), "spec": _spec_dict(message.spec)})


def snapshot_to_proto(info: models.SnapshotInfo) -> pb.SnapshotInfo:
    return _from_model(pb.SnapshotInfo(), info)


def snapshot_from_proto(message: pb.SnapshotInfo) -> models.SnapshotInfo:
    return models.SnapshotInfo.model_validate(to_dict(message))


class Renewal(models.Model):
    """A lease renewal's arguments (the REST body of ``/renew``): ``ttl_s`` from now, or the spec's ttl."""

    ttl_s: float | None = Field(
        None, gt=0, le=models.MAX_LEASE_S, description="Seconds from now; the sandbox's spec.ttl_s when null."
    )

    @field_validator("ttl_s", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: object) -> object:
        # pydantic's lax mode takes true for 1 second; JSON Schema's number does not
        if isinstance(value, bool):
            raise ValueError("ttl_s must be a number of seconds, not a boolean")
        return value


# --------------------------------------------------------------------------- actions


def exec_to_proto(request: models.Exec) -> pb.Exec:
    message = pb.Exec()
    fill(message, request.model_dump(exclude_none=True, exclude={"type", "cmd"}))
    if isinstance(request.cmd, str):
        message.shell = request.cmd
    else:
        message.argv.SetInParent()
        message.argv.args.extend(request.cmd)
    return message


def _exec_dict(message: pb.Exec) -> dict[str, Any]:
    data = to_dict(message)
    shell, argv = data.pop("shell", None), data.pop("argv", None)
    if shell is not None:
        data["cmd"] = shell
    elif argv is not None:
        data["cmd"] = argv.get("args", [])
    return data


def exec_from_proto(message: pb.Exec) -> models.Exec:
    return validate(models.Exec, _exec_dict(message), what="exec")


def action_to_proto(action: models.Action) -> pb.Action:
    message = pb.Action()
    if isinstance(action, models.Exec):
        message.exec.CopyFrom(exec_to_proto(action))
    else:
        fill(getattr(message, action.type), action.model_dump(exclude_none=True, exclude={"type"}))
    return message


def action_from_proto(message: pb.Action) -> models.Action:
    which = message.WhichOneof("action")
    if which is None:
        names = ", ".join(f.name for f in message.DESCRIPTOR.oneofs_by_name["action"].fields)
        raise InvalidArgument(f"invalid action: action: no action is set (set one of: {names})")
    body = getattr(message, which)
    data = _exec_dict(body) if which == "exec" else to_dict(body)
    return validate_action({**data, "type": which})


# --------------------------------------------------------------------------- results


def exec_result_to_proto(result: models.ExecResult) -> pb.ExecResult:
    return _from_model(pb.ExecResult(), result)


def _exec_result_dict(data: dict[str, Any]) -> dict[str, Any]:
    return {"exit_code": None, **data}  # required by the model; unset on the wire means None


def exec_result_from_proto(message: pb.ExecResult) -> models.ExecResult:
    return models.ExecResult.model_validate(_exec_result_dict(to_dict(message)))


def observation_to_proto(obs: models.Observation) -> pb.Observation:
    message = pb.Observation()
    fill(message, obs.model_dump(exclude_none=True, exclude={"value", "info", "cursor"}))
    if obs.value is not None:
        message.value = json.dumps(obs.value)
    if obs.info:
        message.info = json.dumps(obs.info)
    if obs.cursor is not None:
        message.cursor.x, message.cursor.y = obs.cursor
    return message


def observation_from_proto(message: pb.Observation) -> models.Observation:
    data = to_dict(message)
    value, info, cursor = data.pop("value", None), data.pop("info", ""), data.pop("cursor", None)
    if value is not None:
        data["value"] = json.loads(value)
    if info:
        data["info"] = json.loads(info)
    if cursor is not None:
        data["cursor"] = (cursor["x"], cursor["y"])
    if "exec" in data:
        data["exec"] = _exec_result_dict(data["exec"])
    return models.Observation.model_validate(data)


def file_info_to_proto(info: models.FileInfo) -> pb.FileInfo:
    return _from_model(pb.FileInfo(), info)


def file_info_from_proto(message: pb.FileInfo) -> models.FileInfo:
    return models.FileInfo.model_validate(to_dict(message))


def health_to_proto(health: models.Health) -> pb.Health:
    return _from_model(pb.Health(), health)


def health_from_proto(message: pb.Health) -> models.Health:
    return models.Health.model_validate(to_dict(message))


# --------------------------------------------------------------------------- previews


def url_request_to_proto(sandbox_id: str, request: UrlRequest) -> pb.PreviewUrlRequest:
    return _from_model(pb.PreviewUrlRequest(sandbox_id=sandbox_id), request)


def url_request_from_proto(message: pb.PreviewUrlRequest) -> UrlRequest:
    """The port and ticket lifetime asked for, or :class:`InvalidArgument` naming the bad one (an unset port is 0)."""
    data = to_dict(message)
    data.pop("sandbox_id", None)
    return validate(UrlRequest, data, what="preview URL request")


def port_url_to_proto(minted: PortUrl) -> pb.PortUrl:
    return _from_model(pb.PortUrl(), minted)


def port_url_from_proto(message: pb.PortUrl) -> PortUrl:
    return PortUrl.model_validate(to_dict(message))


def lane_to_proto(lane: models.LaneInfo) -> pb.Lane:
    return _from_model(pb.Lane(), lane)


def lane_from_proto(message: pb.Lane) -> models.LaneInfo:
    return models.LaneInfo.model_validate(to_dict(message))
