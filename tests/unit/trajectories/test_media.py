"""Media kept with trajectories (screen recordings): the local store (kept once per content, listed in the summary,
read by range, refused past the size cap, gone with the trajectory), the API over it on both skins (gRPC in pieces,
REST with the ref's content type), each tenant seeing only its own, the Parquet export listing them, and the proto
mirroring ``MediaRef``."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from pydantic import BaseModel

from sandbox.client import AsyncClient
from sandbox.errors import InvalidArgument, NotFound
from sandbox.models import Observation, SandboxKind
from sandbox.service import SandboxService
from sandbox.trajectories import LocalTrajectoryStore, MediaRef, TrajectoryInfo, TrajectoryStep
from sandbox.trajectories import local as local_store
from sandbox.trajectories.export import MEDIA_METADATA, STEP_COLUMNS, to_parquet
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from tests.unit.conftest import ADMIN, ALPHA, BETA
from tests.unit.wire.test_proto_sync import difference, field_names

RECORD_TRAJECTORIES = True  # the conftest's service records this module's trajectories to a directory
MP4 = b"\x00\x00\x00\x18ftypmp42\x00\x00\x00\x00mp42isom" + bytes(range(256)) * 10


def info(trajectory_id: str, tenant: str) -> TrajectoryInfo:
    return TrajectoryInfo(
        id=trajectory_id, tenant=tenant, sandbox_id="sb-andr-1", kind=SandboxKind.ANDROID, instance="in-andr-1",
        image="sandbox/android:latest", task_id="t-media", task_digest="d" * 64, started_at=time.time(),
    )  # fmt: skip


async def recorded(store: LocalTrajectoryStore, meta: TrajectoryInfo, *media: bytes) -> list[MediaRef]:
    await store.create(meta)
    step = TrajectoryStep(index=0, at=time.time(), observation=Observation())
    await store.append(meta.tenant, meta.id, step)
    return [
        await store.attach_media(
            meta.tenant, meta.id, data, content_type="video/mp4", name=f"screen-{i:04d}.mp4", started_at=1.0 + i
        )
        for i, data in enumerate(media)
    ]


# --------------------------------------------------------------------------- the local store


async def test_the_store_keeps_media_once_and_reads_ranges(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path)
    meta = info("tr-00000000000000d1", "alpha")
    first, again, second = await recorded(store, meta, MP4, MP4, MP4 + b"more")
    assert first == again  # the same content: kept once, listed once
    assert first.sha256 == hashlib.sha256(MP4).hexdigest() and first.size == len(MP4)
    assert (first.content_type, first.name, first.started_at) == ("video/mp4", "screen-0000.mp4", 1.0)
    assert sorted(p.name for p in (tmp_path / "alpha" / meta.id / "media").iterdir()) == sorted(
        {f"{first.sha256}.mp4", f"{second.sha256}.mp4"}
    )
    got = await store.get(meta.id, tenant="alpha")
    assert got is not None and got.info.media == [first, second] and len(got.steps) == 1

    assert await store.media(meta.id, first.sha256, tenant="alpha") == (first, MP4)
    assert await store.media(meta.id, first.sha256, tenant=None) == (first, MP4)  # an admin's
    assert await store.media(meta.id, first.sha256, tenant="alpha", offset=8, length=4) == (first, b"mp42")
    assert await store.media(meta.id, first.sha256, tenant="alpha", offset=len(MP4)) == (first, b"")
    assert await store.media(meta.id, first.sha256, tenant="beta") is None  # another tenant's: none
    assert await store.media(meta.id, "0" * 64, tenant="alpha") is None
    with pytest.raises(InvalidArgument, match="SHA-256"):
        await store.media(meta.id, "../meta.json", tenant="alpha")
    with pytest.raises(InvalidArgument, match=">= 0"):
        await store.media(meta.id, first.sha256, tenant="alpha", offset=-1)

    await store.warn("alpha", meta.id, "the screen recording from 150 s into the episode was lost: gone")
    await store.update("alpha", meta.id, {"steps": 3})  # a later summary change keeps media and warnings
    again = await store.get(meta.id, tenant="alpha")
    assert again is not None
    again_info = again.info
    assert again_info.media == [first, second] and again_info.steps == 3
    assert again_info.warnings == ["the screen recording from 150 s into the episode was lost: gone"]

    assert await store.delete(meta.id, tenant="alpha")
    assert await store.media(meta.id, first.sha256, tenant="alpha") is None
    assert not (tmp_path / "alpha" / meta.id).exists()


async def test_the_store_refuses_what_it_cannot_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalTrajectoryStore(tmp_path)
    meta = info("tr-00000000000000d2", "alpha")
    await recorded(store, meta)
    monkeypatch.setattr(local_store, "MAX_MEDIA_BYTES", 2 << 20)
    with pytest.raises(InvalidArgument, match=r"a medium of 2\.0 MiB is over the 2 MiB a trajectory keeps"):
        await store.attach_media(
            "alpha", meta.id, b"x" * ((2 << 20) + 1), content_type="video/mp4", name="big", started_at=1
        )
    with pytest.raises(InvalidArgument, match="not a media type"):
        await store.attach_media("alpha", meta.id, b"x", content_type="mp4", name="x", started_at=1)
    with pytest.raises(NotFound, match="no trajectory"):  # another tenant's trajectory: none to attach to
        await store.attach_media("beta", meta.id, b"x", content_type="video/mp4", name="x", started_at=1)
    got = await store.get(meta.id, tenant="alpha")
    assert got is not None and got.info.media == []  # nothing half-kept
    assert not (tmp_path / "alpha" / meta.id / "media").exists()


# --------------------------------------------------------------------------- through the API


async def test_media_through_grpc_and_rest(
    service: SandboxService,
    alpha: AsyncClient,
    beta: AsyncClient,
    admin: AsyncClient,
    api: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = service.trajectories
    assert isinstance(store, LocalTrajectoryStore)
    meta = info("tr-00000000000000e1", "alpha")
    (ref,) = await recorded(store, meta, MP4)

    got = await alpha.trajectories.get(meta.id)
    assert got.info.media == [ref] and got.info.warnings == []  # the ref survives model -> proto -> model
    assert await alpha.trajectories.media(meta.id, ref.sha256) == MP4
    assert await admin.trajectories.media(meta.id, ref.sha256) == MP4
    # In pieces: the server gives at most its chunk a call, the SDK asks until it has the whole medium.
    monkeypatch.setattr("sandbox.api.grpc.server.MEDIA_CHUNK_BYTES", 1000)
    monkeypatch.setattr("sandbox.client._episodes.MEDIA_CHUNK_BYTES", 700)
    assert len(MP4) > 3 * 700 and await alpha.trajectories.media(meta.id, ref.sha256) == MP4
    for reach in (beta.trajectories.media(meta.id, ref.sha256), alpha.trajectories.media(meta.id, "0" * 64)):
        with pytest.raises(NotFound, match="no medium"):
            await reach

    url = f"/v1/trajectories/{meta.id}/media/{ref.sha256}"
    r = await api.get(url, headers=ALPHA)
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "video/mp4", MP4), r.text
    assert r.headers["content-disposition"] == 'attachment; filename="screen-0000.mp4"'
    assert (await api.get(url, headers=ADMIN)).content == MP4
    r = await api.get(url, headers=BETA)
    assert r.status_code == 404 and "no medium" in r.json()["error"]["message"], r.text
    assert (await api.get(f"/v1/trajectories/{meta.id}/media/../meta.json", headers=ALPHA)).status_code == 404
    assert (await api.get(f"/v1/trajectories/{meta.id}/media/{'A' * 64}", headers=ALPHA)).status_code == 422
    r = await api.get(f"/v1/trajectories/{meta.id}", headers=ALPHA)
    assert r.json()["info"]["media"] == [ref.model_dump(mode="json")], r.text


# --------------------------------------------------------------------------- export, proto


async def test_export_lists_media_in_its_metadata_and_keeps_its_rows(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path / "store")
    with_media, without = info("tr-00000000000000f1", "alpha"), info("tr-00000000000000f2", "alpha")
    (ref,) = await recorded(store, with_media, MP4)
    await recorded(store, without)
    trajectories = [await store.get(t.id, tenant="alpha") for t in (with_media, without)]
    out = tmp_path / "steps.parquet"
    result = to_parquet([t for t in trajectories if t], out, frames=lambda t, s: None)
    assert (result.rows, result.media) == (2, 1)
    assert pq.read_table(out).column_names == list(STEP_COLUMNS)
    metadata = pq.read_schema(out).metadata
    assert json.loads(metadata[MEDIA_METADATA.encode()]) == {with_media.id: [ref.model_dump(mode="json")]}


@pytest.mark.parametrize("model", [MediaRef, TrajectoryInfo])
def test_the_proto_mirrors_the_media_models(model: type[BaseModel]) -> None:
    model_fields = set(model.model_fields)
    proto_fields = field_names(pb.DESCRIPTOR.message_types_by_name[model.__name__])
    assert model_fields == proto_fields, f"{model.__name__}: {difference(model_fields, proto_fields)}"
