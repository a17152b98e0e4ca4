"""The .proto, its generated stubs and the models cannot drift apart.

- The stubs in the package are exactly what ``scripts/gen_proto.sh`` makes from the .proto now.
- Every member of the ``models.Action`` union is a same-named field of the proto ``Action``
  oneof (its ``type``) and vice versa, with the same fields; likewise every mirrored model.
- Every model enum has the same values as its proto enum.
- Every action survives model → proto → model unchanged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from google.protobuf.descriptor import Descriptor
from pydantic import BaseModel

from sandbox import models
from sandbox.errors import InvalidArgument
from sandbox.models import android as models_android
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb

ROOT = Path(__file__).resolve().parents[3]
GENERATED = ROOT / "sandbox" / "wire" / "grpc_gen"
STUBS = ("sandbox_pb2.py", "sandbox_pb2.pyi", "sandbox_pb2_grpc.py")

# proto message ↔ model, for every message that mirrors a model (actions are checked through the union).
MIRRORED: dict[str, type[BaseModel]] = {
    "Resources": models.Resources,
    "ScreenSize": models.ScreenSize,
    "VolumeMount": models.VolumeMount,
    "SandboxSpec": models.SandboxSpec,
    "SandboxInfo": models.SandboxInfo,
    "SnapshotInfo": models.SnapshotInfo,
    "ExecResult": models.ExecResult,
    "Screenshot": models.Screenshot,
    "Observation": models.Observation,
    "FileInfo": models.FileInfo,
    "HealthCheck": models.HealthCheck,
    "Health": models.Health,
    "PortUrl": models.PortUrl,
}
ENUMS = {"SandboxKind": models.SandboxKind, "SandboxState": models.SandboxState, "NetworkPolicy": models.NetworkPolicy}


def field_names(message: Descriptor) -> set[str]:
    """The message's fields as the model sees them: a real oneof (``Exec.cmd``) counts as one field."""
    names = {f.name for f in message.fields if f.containing_oneof is None or f.containing_oneof.name.startswith("_")}
    return names | {o.name for o in message.oneofs if not o.name.startswith("_")}  # `_x`: proto3 `optional x`


def difference(model_fields: set[str], proto_fields: set[str]) -> str:
    return f"only in the model: {model_fields - proto_fields}; only in the proto: {proto_fields - model_fields}"


def test_generated_stubs_match_the_proto(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)], check=True, timeout=120)
    stale = [name for name in STUBS if (GENERATED / name).read_bytes() != (tmp_path / name).read_bytes()]
    assert not stale, (
        f"the generated stubs {stale} do not match proto/sandbox/v1/sandbox.proto: run scripts/gen_proto.sh"
    )


def test_action_union_and_proto_oneof_have_the_same_members() -> None:
    union = {m.model_fields["type"].default: m for m in convert.ACTION_TYPES}
    oneof = {f.name: f.message_type for f in pb.Action.DESCRIPTOR.oneofs_by_name["action"].fields}
    assert set(union) == set(oneof), (
        f"only in models: {set(union) - set(oneof)}; only in proto: {set(oneof) - set(union)}"
    )
    for name, model in union.items():
        assert model.__name__ == oneof[name].name, f"Action.{name} should be message {model.__name__}"
        model_fields = set(model.model_fields) - {"type"}  # the oneof case is the type
        proto_fields = field_names(oneof[name])
        assert model_fields == proto_fields, f"action {name}: {difference(model_fields, proto_fields)}"


@pytest.mark.parametrize("message_name", sorted(MIRRORED))
def test_mirrored_messages_have_the_models_fields(message_name: str) -> None:
    model_fields = set(MIRRORED[message_name].model_fields)
    proto_fields = field_names(pb.DESCRIPTOR.message_types_by_name[message_name])
    assert model_fields == proto_fields, f"{message_name}: {difference(model_fields, proto_fields)}"


@pytest.mark.parametrize("enum_name", sorted(ENUMS))
def test_enums_have_the_models_values(enum_name: str) -> None:
    descriptor = pb.DESCRIPTOR.enum_types_by_name[enum_name]
    prefix = convert.enum_prefix(descriptor)
    proto_values = {v.name.removeprefix(prefix).lower() for v in descriptor.values if v.number != 0}
    assert proto_values == {m.value for m in ENUMS[enum_name]}
    assert descriptor.values_by_number[0].name == prefix + "UNSPECIFIED"


EXAMPLES: list[models.Action] = [
    models.Move(x=0, y=16_384),
    models.Click(),
    models.Click(x=3, y=4, button="middle", count=3),
    models.DoubleClick(x=1, y=2),
    models.RightClick(),
    models.Drag(x=1, y=2, to_x=3, to_y=4, button="right"),
    models.Scroll(dx=-100, dy=0),
    models.TypeText(text="héllo\n", interval_ms=5),
    models.Key(key="ctrl+c"),
    models.Hotkey(keys=["ctrl", "shift", "t"]),
    models.KeyDown(key="Shift_L"),
    models.KeyUp(key="Shift_L"),
    models.MouseDown(button="left", x=0, y=0),
    models.MouseUp(),
    models.Wait(seconds=0.0),
    models.Exec(cmd="echo hi", timeout=1.5, cwd="/tmp", env={"A": "1"}, session="s", keep_background=True),
    models.Exec(cmd=["ls", "-l"]),
    models.Exec(cmd=[]),
    models.Navigate(url="https://example.org", timeout=5),
    models.Evaluate(expression="1 + 1"),
    models.Navigate(url="file:///opt/sandbox/games/tiles/index.html", page="A1B2"),
    models.Evaluate(expression="game.state()", page="A1B2"),
    models.PageOpen(url="file:///opt/sandbox/games/reflex/index.html?seed=7", clock="paused", factor=2.5),
    models.PageOpen(url="about:blank"),
    models.PageClose(page="A1B2"),
    models.Clock(op="step", ms=1000, page="A1B2"),
    models.Clock(op="speed", factor=4),
    models.Clock(op="pause"),
    models.PageKey(key="ArrowUp", page="A1B2"),
    models.PageClick(x=55, y=125, button="right", count=2, page="A1B2"),
    models.Pyautogui(code="import pyautogui; pyautogui.click(10, 20)"),
    models.Done(),
    models.Fail(),
    models_android.Tap(x=0, y=16_384),
    models_android.LongPress(x=5, y=6),
    models_android.LongPress(x=5, y=6, duration_ms=10_000),
    models_android.Swipe(x=1, y=2, to_x=3, to_y=4),
    models_android.Swipe(x=1, y=2, to_x=3, to_y=4, duration_ms=1),
    models_android.OpenApp(package="com.android.settings"),
    models_android.OpenApp(package="com.example.app", activity=".MainActivity$Inner"),
]


def test_examples_cover_every_action() -> None:
    assert {type(a) for a in EXAMPLES} == set(convert.ACTION_TYPES)


@pytest.mark.parametrize("action", EXAMPLES, ids=lambda a: a.type)
def test_actions_round_trip(action: models.Action) -> None:
    message = pb.Action.FromString(convert.action_to_proto(action).SerializeToString())
    assert convert.action_from_proto(message) == action


def test_results_round_trip() -> None:
    spec = models.SandboxSpec(
        kind=models.SandboxKind.DESKTOP,
        image="custom:1",
        resources=models.Resources(cpus=0.5, memory_mb=512),
        network=models.NetworkPolicy.EGRESS,
        volumes=(models.VolumeMount(name="data", path="/data", read_only=True),),
        env={"A": "1"},
        labels={"team": "rl"},
        snapshot="base.v1",
        ttl_s=60.5,
        idle_timeout_s=None,
        auto_recover=True,
    )
    info = models.SandboxInfo(
        id="desk-1", tenant="t", kind=spec.kind, state=models.SandboxState.UNHEALTHY, spec=spec,
        created_at=1.5, last_active_at=2.5, expires_at=3.5, error="agent: gone", replacements=2,
    )  # fmt: skip
    assert convert.info_from_proto(convert.info_to_proto(info)) == info
    expired = info.model_copy(
        update={"state": models.SandboxState.EXPIRED, "spec": spec.model_copy(update={"idle_timeout_s": 5.0})}
    )
    assert convert.info_from_proto(convert.info_to_proto(expired)) == expired
    snapshot = models.SnapshotInfo(
        name="base.v1", tenant="t", kind=models.SandboxKind.DESKTOP, image="sandbox-snap:t.base.v1", source="desk-1",
        created_at=4.5, warm=3,
    )  # fmt: skip
    assert convert.snapshot_from_proto(convert.snapshot_to_proto(snapshot)) == snapshot
    obs = models.Observation(
        screenshot=models.Screenshot(data=b"\x89PNG\x00", width=2, height=1, format="png"),
        exec=models.ExecResult(exit_code=None, stdout="", stderr="x", timed_out=True),
        url="about:blank", title="", value=[1, {"a": None}], cursor=(0, 7), timings_ms={"total": 1.25},
        reward=0.0, done=True, info={"k": [1]},
    )  # fmt: skip
    assert convert.observation_from_proto(convert.observation_to_proto(obs)) == obs
    assert convert.observation_from_proto(convert.observation_to_proto(models.Observation())) == models.Observation()
    zero = models.Observation(value=0, exec=models.ExecResult(exit_code=0, stdout="", stderr=""))
    assert convert.observation_from_proto(convert.observation_to_proto(zero)) == zero
    health = models.Health(ok=False, checks={"shell": models.HealthCheck(ok=False, detail="dead")})
    assert convert.health_from_proto(convert.health_to_proto(health)) == health
    entry = models.FileInfo(name="a", path="/a", type="dir", size=0, mode=0o755, mtime=0.0)
    assert convert.file_info_from_proto(convert.file_info_to_proto(entry)) == entry


def test_mirrored_table_covers_every_model_with_a_message() -> None:
    names = {n for n, v in vars(models).items() if isinstance(v, type) and issubclass(v, models.Model)}
    action_names = {m.__name__ for m in convert.ACTION_TYPES}
    with_message = names & set(pb.DESCRIPTOR.message_types_by_name)
    assert with_message - action_names == set(MIRRORED)


# --------------------------------------------------------------------------- SandboxSpec.idle_timeout_s on the wire


def test_idle_timeout_unset_is_the_default_and_never_is_none() -> None:
    default = models.SandboxSpec.model_fields["idle_timeout_s"].default
    assert default is not None
    bare = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL)
    assert convert.spec_from_proto(bare).idle_timeout_s == default
    never = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, idle_timeout_s=pb.IdleTimeout(never=True))
    assert convert.spec_from_proto(never).idle_timeout_s is None
    seconds = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, idle_timeout_s=pb.IdleTimeout(seconds=90))
    assert convert.spec_from_proto(seconds).idle_timeout_s == 90
    # None leaves the model as an explicit `never`, never as "unset" (which would read back as the default)
    sent = convert.spec_to_proto(models.SandboxSpec(kind=models.SandboxKind.TERMINAL, idle_timeout_s=None))
    assert sent.idle_timeout_s.WhichOneof("timeout") == "never" and sent.idle_timeout_s.never


@pytest.mark.parametrize(
    "idle",
    [pb.IdleTimeout(), pb.IdleTimeout(never=False), pb.IdleTimeout(seconds=0), pb.IdleTimeout(seconds=-1)],
    ids=["empty", "never-false", "zero", "negative"],
)
def test_a_meaningless_idle_timeout_is_invalid(idle: pb.IdleTimeout) -> None:
    message = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, idle_timeout_s=idle)
    with pytest.raises(InvalidArgument, match="idle_timeout_s"):
        convert.spec_from_proto(message)


def test_lease_fields_are_validated_by_the_model() -> None:
    for bad in ({"ttl_s": 0.0}, {"ttl_s": 8 * 24 * 3600.0}):
        with pytest.raises(InvalidArgument, match="ttl_s"):
            convert.spec_from_proto(pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, **bad))
    spec = convert.spec_from_proto(
        pb.SandboxSpec(kind=pb.SANDBOX_KIND_BROWSER, snapshot="s", ttl_s=10, auto_recover=True)
    )
    assert (spec.snapshot, spec.ttl_s, spec.auto_recover) == ("s", 10, True)
    assert models.MAX_LEASE_S == 7 * 24 * 3600
    with pytest.raises(InvalidArgument, match="ttl_s"):
        convert.validate(convert.Renewal, {"ttl_s": models.MAX_LEASE_S + 1}, what="renewal")


def test_the_removed_state_is_reserved() -> None:
    descriptor = pb.DESCRIPTOR.enum_types_by_name["SandboxState"]
    assert 4 not in descriptor.values_by_number  # was STOPPED: never reused
    assert descriptor.values_by_name["SANDBOX_STATE_DELETED"].number == 5
    assert descriptor.values_by_name["SANDBOX_STATE_EXPIRED"].number == 6
