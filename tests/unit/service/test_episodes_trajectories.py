"""Trajectories: the local store (steps in order, frames kept once per content), and the API over it on both skins
(list by task, get, frames, delete), each tenant seeing only its own; the proto mirrors the trajectory models."""

from __future__ import annotations

import io
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image
from pydantic import BaseModel

from sandbox.client import AsyncClient
from sandbox.errors import InvalidArgument, NotFound
from sandbox.models import Observation, SandboxKind, Screenshot
from sandbox.service import SandboxService
from sandbox.trajectories import FrameRef, LocalTrajectoryStore, TrajectoryInfo, TrajectoryStep, frame_hash
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from tests.unit.conftest import ALPHA, BETA
from tests.unit.wire.test_proto_sync import difference, field_names

RECORD_TRAJECTORIES = True  # the conftest's service records this module's trajectories to a directory


def png(color: tuple[int, int, int], size: tuple[int, int] = (64, 40)) -> Screenshot:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return Screenshot(data=out.getvalue(), width=size[0], height=size[1], format="png")


def info(trajectory_id: str, tenant: str, *, task_id: str = "t1") -> TrajectoryInfo:
    return TrajectoryInfo(
        id=trajectory_id, tenant=tenant, sandbox_id="sb-desk-1", kind=SandboxKind.DESKTOP, instance="in-desk-1",
        image="sandbox/desktop:latest", task_id=task_id, task_digest="d" * 64, started_at=time.time(),
    )  # fmt: skip


async def record(store: LocalTrajectoryStore, meta: TrajectoryInfo, frames: list[Screenshot | None]) -> None:
    """A trajectory whose step i shows ``frames[i]`` (step 0 is the reset)."""
    await store.create(meta)
    for index, frame in enumerate(frames):
        action = None if index == 0 else {"type": "click", "x": index, "y": 1}
        step = TrajectoryStep(index=index, at=time.time(), action=action, observation=Observation(info={"i": index}))
        await store.append(meta.tenant, meta.id, step, frame, changes={"steps": index})


# --------------------------------------------------------------------------- the local store


async def test_frames_are_kept_once_per_content(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path)
    red, blue = png((255, 0, 0)), png((0, 0, 255))
    meta = info("tr-0000000000000001", "alpha")
    await record(store, meta, [red, red, blue, None, red])
    directory = tmp_path / "alpha" / meta.id
    frames = sorted(p.name for p in (directory / "frames").iterdir())
    assert frames == sorted({f"{frame_hash(red.data)}.png", f"{frame_hash(blue.data)}.png"})
    assert (directory / "meta.json").is_file() and len((directory / "steps.jsonl").read_text().splitlines()) == 5

    got = await store.get(meta.id, tenant="alpha")
    assert got is not None and [s.index for s in got.steps] == [0, 1, 2, 3, 4]
    assert (got.info.frames, got.info.steps) == (2, 4)
    refs = [s.frame for s in got.steps]
    assert refs[0] == refs[1] == refs[4] == FrameRef(sha256=frame_hash(red.data), format="png", width=64, height=40)
    assert refs[2] is not None and refs[2].sha256 == frame_hash(blue.data) and refs[3] is None
    assert all(s.observation.screenshot is None for s in got.steps)
    assert await store.frame(meta.id, frame_hash(blue.data), tenant="alpha") == blue
    assert await store.frame(meta.id, "0" * 64, tenant="alpha") is None

    with (directory / "steps.jsonl").open("a") as f:
        f.write('{"index": 5, "at": 1.0, "observ')  # a line torn by a crash
    again = await store.get(meta.id, tenant="alpha")
    assert again is not None and len(again.steps) == 5


async def test_the_store_keeps_tenants_apart_and_checks_names(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path)
    await record(store, info("tr-00000000000000a1", "alpha", task_id="x"), [None])
    await record(store, info("tr-00000000000000a2", "alpha", task_id="y"), [None])
    await record(store, info("tr-00000000000000b1", "../beta", task_id="x"), [None])  # a tenant that is no file name
    assert [t.id for t in await store.list(tenant="alpha")] == ["tr-00000000000000a1", "tr-00000000000000a2"]
    assert [t.id for t in await store.list(tenant="alpha", task_id="x")] == ["tr-00000000000000a1"]
    assert [t.id for t in await store.list(tenant=None, task_id="x")] == ["tr-00000000000000a1", "tr-00000000000000b1"]
    assert await store.get("tr-00000000000000b1", tenant="alpha") is None
    assert (await store.get("tr-00000000000000b1", tenant=None)) is not None
    assert not (tmp_path / ".." / "beta").exists() and len(list(tmp_path.iterdir())) == 2
    assert not await store.delete("tr-00000000000000b1", tenant="alpha")
    assert await store.delete("tr-00000000000000b1", tenant="../beta")
    for bad in ("../alpha", "tr-1", "tr-00000000000000a1/.."):
        with pytest.raises(InvalidArgument, match="not a trajectory id"):
            await store.get(bad, tenant="alpha")
    with pytest.raises(InvalidArgument, match="SHA-256"):
        await store.frame("tr-00000000000000a1", "../../meta.json", tenant="alpha")


# --------------------------------------------------------------------------- through the API


async def test_trajectories_through_grpc_and_rest(
    service: SandboxService, alpha: AsyncClient, beta: AsyncClient, admin: AsyncClient, api: httpx.AsyncClient
) -> None:
    store = service.trajectories
    assert isinstance(store, LocalTrajectoryStore)
    green = png((0, 200, 0))
    mine, theirs = info("tr-00000000000000c1", "alpha", task_id="tg"), info("tr-00000000000000c2", "beta")
    await record(store, mine, [green, green])
    await record(store, theirs, [None])

    assert [t.id for t in await alpha.trajectories.list(task_id="tg")] == [mine.id]
    assert mine.id not in {t.id for t in await beta.trajectories.list()}
    assert {mine.id, theirs.id} <= {t.id for t in await admin.trajectories.list()}
    got = await alpha.trajectories.get(mine.id)
    assert got.info.id == mine.id and [s.action for s in got.steps] == [None, {"type": "click", "x": 1, "y": 1}]
    ref = got.steps[1].frame
    assert ref is not None and await alpha.trajectories.frame(mine.id, ref.sha256) == green
    for reach in (beta.trajectories.get(mine.id), beta.trajectories.frame(mine.id, ref.sha256)):
        with pytest.raises(NotFound, match=r"no (trajectory|frame)"):
            await reach
    with pytest.raises(NotFound):
        await beta.trajectories.delete(mine.id)

    r = await api.get("/v1/trajectories", params={"task_id": "tg"}, headers=ALPHA)
    assert r.status_code == 200 and [t["id"] for t in r.json()["trajectories"]] == [mine.id], r.text
    r = await api.get(f"/v1/trajectories/{mine.id}", headers=ALPHA)
    assert r.status_code == 200 and r.json()["steps"][1]["frame"]["sha256"] == ref.sha256, r.text
    r = await api.get(f"/v1/trajectories/{mine.id}/frames/{ref.sha256}", headers=ALPHA)
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "image/png", green.data)
    assert (await api.get(f"/v1/trajectories/{mine.id}", headers=BETA)).status_code == 404
    assert (await api.get(f"/v1/trajectories/{mine.id}/frames/{ref.sha256}", headers=BETA)).status_code == 404
    assert (await api.get("/v1/trajectories/tr-nope", headers=ALPHA)).status_code == 422
    assert (await api.delete(f"/v1/trajectories/{mine.id}", headers=BETA)).status_code == 404
    assert (await api.delete(f"/v1/trajectories/{mine.id}", headers=ALPHA)).status_code == 204
    with pytest.raises(NotFound):
        await alpha.trajectories.get(mine.id)
    await admin.trajectories.delete(theirs.id)  # an admin reaches every tenant's
    assert theirs.id not in {t.id for t in await beta.trajectories.list()}


async def test_without_a_store_the_calls_say_so(alpha: AsyncClient, service: SandboxService) -> None:
    from sandbox.errors import FailedPrecondition

    kept, service.trajectories = service.trajectories, None
    try:
        with pytest.raises(FailedPrecondition, match="records no trajectories"):
            await alpha.trajectories.list()
    finally:
        service.trajectories = kept


# --------------------------------------------------------------------------- the proto mirrors the models


@pytest.mark.parametrize("model", [TrajectoryInfo, FrameRef, TrajectoryStep])
def test_the_proto_mirrors_the_trajectory_models(model: type[BaseModel]) -> None:
    model_fields = set(model.model_fields)
    proto_fields = field_names(pb.DESCRIPTOR.message_types_by_name[model.__name__])
    assert model_fields == proto_fields, f"{model.__name__}: {difference(model_fields, proto_fields)}"
