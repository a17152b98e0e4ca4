"""Leases (ttl, idle timeout, renew), reset to a snapshot and snapshots, through both skins: the
SDK over a real ``grpc.aio`` server and REST in-process (ASGI), over one service on the fake
backend. The fake backend cannot take snapshots, so taking one ends in FAILED_PRECONDITION/409
once the arguments pass; what is checked here is the validation and error mapping around it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio

from sandbox.client import AsyncClient, AsyncSandbox, Client
from sandbox.errors import FailedPrecondition, InvalidArgument, NotFound
from sandbox.models import SandboxSpec, SandboxState
from sandbox.service import SandboxService
from sandbox.service.records import SANDBOXES, LeaseEnd, SandboxRecord
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, BETA, BETA_TOKEN

DEFAULT_TTL_S = SandboxSpec.model_fields["ttl_s"].default
DEFAULT_IDLE_S = SandboxSpec.model_fields["idle_timeout_s"].default
AUTH_ALPHA = (("authorization", f"Bearer {ALPHA_TOKEN}"),)


@pytest_asyncio.fixture
async def raw(target: str) -> AsyncIterator[Any]:
    """The generated stub itself, to send what the SDK would refuse to."""
    async with grpc.aio.insecure_channel(target) as channel:
        yield pb_grpc.SandboxServiceStub(channel)


@pytest_asyncio.fixture
async def sandbox(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    """A terminal sandbox of tenant alpha, deleted afterwards."""
    async with await alpha.create("terminal", labels={"test": "lease"}) as sb:
        yield sb


def error_of(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, f"{r.status_code} != {status}: {r.text}"
    error = r.json()["error"]
    assert set(error) == {"code", "message"} and error["message"], error
    return dict(error)


# --------------------------------------------------------------------------- the lease in the spec


async def test_lease_fields_round_trip_through_the_sdk(alpha: AsyncClient) -> None:
    before = time.time()
    async with await alpha.create("terminal", ttl_s=120, idle_timeout_s=None, auto_recover=True) as sb:
        spec = sb.info.spec
        assert (spec.ttl_s, spec.idle_timeout_s, spec.auto_recover, spec.snapshot) == (120, None, True, None)
        assert before + 120 <= sb.info.expires_at <= time.time() + 120
        assert sb.info.replacements == 0
        assert (await sb.refresh()).spec.idle_timeout_s is None  # "never" is not read back as the default
    async with await alpha.create("terminal", idle_timeout_s=30) as sb:
        assert (sb.info.spec.idle_timeout_s, sb.info.spec.ttl_s) == (30, DEFAULT_TTL_S)
    async with await alpha.create("terminal") as sb:
        assert (sb.info.spec.idle_timeout_s, sb.info.spec.auto_recover) == (DEFAULT_IDLE_S, False)


async def test_bad_lease_fields_fail_in_the_sdk_and_on_the_server(alpha: AsyncClient, raw: Any) -> None:
    for bad in ({"ttl_s": 0}, {"ttl_s": 8 * 86400}, {"idle_timeout_s": -1}, {"auto_recover": "maybe"}):
        with pytest.raises(InvalidArgument, match=next(iter(bad))):
            await alpha.create("terminal", **bad)
    for idle in (pb.IdleTimeout(), pb.IdleTimeout(never=False), pb.IdleTimeout(seconds=0)):
        spec = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, idle_timeout_s=idle)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw.CreateSandbox(pb.CreateSandboxRequest(spec=spec), metadata=AUTH_ALPHA)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "idle_timeout_s" in str(caught.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        spec = pb.SandboxSpec(kind=pb.SANDBOX_KIND_TERMINAL, ttl_s=-5)
        await raw.CreateSandbox(pb.CreateSandboxRequest(spec=spec), metadata=AUTH_ALPHA)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "ttl_s" in str(caught.value.details())


async def test_creating_from_an_unknown_snapshot_is_not_found(alpha: AsyncClient, api: httpx.AsyncClient) -> None:
    with pytest.raises(NotFound, match="no snapshot 'nope'"):
        await alpha.create("terminal", snapshot="nope")
    r = await api.post("/v1/sandboxes", json={"kind": "terminal", "snapshot": "nope"}, headers=ALPHA)
    assert error_of(r, 404)["code"] == "not_found"


async def test_rest_create_takes_the_lease_fields(api: httpx.AsyncClient) -> None:
    body = {"kind": "terminal", "ttl_s": 90, "idle_timeout_s": None, "auto_recover": True}
    r = await api.post("/v1/sandboxes", json=body, headers=ALPHA)
    assert r.status_code == 201, r.text
    info = r.json()
    try:
        assert info["spec"]["ttl_s"] == 90 and info["spec"]["idle_timeout_s"] is None
        assert info["spec"]["auto_recover"] is True and info["replacements"] == 0
        assert info["expires_at"] == pytest.approx(info["created_at"] + 90, abs=5)
    finally:
        assert (await api.delete(f"/v1/sandboxes/{info['id']}", headers=ALPHA)).status_code == 204
    r = await api.post("/v1/sandboxes", json={"kind": "terminal", "idle_timeout_s": 0}, headers=ALPHA)
    assert "idle_timeout_s" in error_of(r, 422)["message"]


# --------------------------------------------------------------------------- renew


async def test_renew_through_the_sdk(sandbox: AsyncSandbox, beta: AsyncClient, raw: Any) -> None:
    first = sandbox.info.expires_at
    before = time.time()
    info = await sandbox.renew(30)
    assert sandbox.info is info and info.state is SandboxState.RUNNING
    assert before + 30 <= info.expires_at <= time.time() + 30 < first  # a renewal may shorten the lease too
    info = await sandbox.renew()  # the spec's ttl_s from now
    assert info.expires_at >= before + DEFAULT_TTL_S
    assert info.spec.ttl_s == DEFAULT_TTL_S  # the spec itself is unchanged

    for bad in (0, -1, 8 * 86400):
        with pytest.raises(InvalidArgument, match="ttl_s"):
            await sandbox.renew(bad)
    for ttl_s in (0.0, -1.0, 8 * 86400.0):  # the server checks too
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw.Renew(pb.RenewRequest(sandbox_id=sandbox.id, ttl_s=ttl_s), metadata=AUTH_ALPHA)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT, ttl_s

    theirs = await beta.list()
    assert sandbox.id not in {s.id for s in theirs}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw.Renew(pb.RenewRequest(sandbox_id=sandbox.id), metadata=(("authorization", f"Bearer {BETA_TOKEN}"),))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == f"no sandbox {sandbox.id!r}"


async def test_renew_through_rest(api: httpx.AsyncClient, sandbox: AsyncSandbox) -> None:
    url = f"/v1/sandboxes/{sandbox.id}/renew"
    before = time.time()
    r = await api.post(url, json={"ttl_s": 45.5}, headers=ALPHA)
    assert r.status_code == 200, r.text
    assert before + 45.5 <= r.json()["expires_at"] <= time.time() + 45.5
    for body in ({"json": {"ttl_s": None}}, {"json": {}}, {}):  # no ttl_s, or no body at all: the spec's ttl
        r = await api.post(url, headers=ALPHA, **body)
        assert r.status_code == 200, (body, r.text)
        assert r.json()["expires_at"] >= before + DEFAULT_TTL_S, body
    for bad in ({"ttl_s": 0}, {"ttl_s": -3}, {"ttl_s": 8 * 86400}, {"ttl_s": "soon"}, {"ttl": 5}):
        r = await api.post(url, json=bad, headers=ALPHA)
        assert error_of(r, 422)["code"] == "invalid_argument", bad
    assert error_of(await api.post(url, json={"ttl_s": 5}, headers=BETA), 404)["code"] == "not_found"
    assert error_of(await api.post(url, json={"ttl_s": 5}), 401)["code"] == "unauthenticated"
    r = await api.post("/v1/sandboxes/term-000000000000/renew", headers=ALPHA)
    assert error_of(r, 404)["message"] == "no sandbox 'term-000000000000'"


async def test_an_expired_sandbox_is_failed_precondition_until_deleted(
    service: SandboxService, alpha: AsyncClient, api: httpx.AsyncClient
) -> None:
    sb = await alpha.create("terminal")
    doc = await service.store.get(SANDBOXES, sb.id)
    assert doc is not None
    await service.expire(SandboxRecord.model_validate(doc), LeaseEnd(time.time(), "ttl", "the test said so"))

    with pytest.raises(FailedPrecondition, match="expired"):
        await sb.renew()
    with pytest.raises(FailedPrecondition, match="expired"):
        await sb.reset()
    r = await api.post(f"/v1/sandboxes/{sb.id}/renew", json={}, headers=ALPHA)
    assert error_of(r, 409)["code"] == "failed_precondition"
    assert sb.id not in {s.id for s in await alpha.list()}
    await sb.close()  # deleting an expired sandbox is allowed
    with pytest.raises(NotFound):
        await alpha.get(sb.id)


# --------------------------------------------------------------------------- reset to a snapshot


async def test_reset_to_a_snapshot(sandbox: AsyncSandbox, api: httpx.AsyncClient) -> None:
    with pytest.raises(NotFound, match="no snapshot 'nope'"):
        await sandbox.reset(snapshot="nope")
    assert sandbox.info.spec.snapshot is None
    info = await sandbox.reset()  # a plain reset still works
    assert info.state is SandboxState.RUNNING and info.spec.snapshot is None

    url = f"/v1/sandboxes/{sandbox.id}/reset"
    r = await api.post(url, json={"snapshot": "nope"}, headers=ALPHA)
    assert error_of(r, 404) == {"code": "not_found", "message": "no snapshot 'nope'"}
    for body in ({}, {"json": {}}, {"json": {"snapshot": None}}, {"json": None}):  # no snapshot: a plain reset
        r = await api.post(url, headers=ALPHA, **body)
        assert r.status_code == 200, (body, r.text)
        assert r.json()["spec"]["snapshot"] is None
    for bad in ({"snapshot": 7}, {"snap": "x"}, [1]):
        assert error_of(await api.post(url, json=bad, headers=ALPHA), 422)["code"] == "invalid_argument", bad
    assert error_of(await api.post(url, json={"snapshot": "x"}, headers=BETA), 404)["code"] == "not_found"


# --------------------------------------------------------------------------- snapshots


async def test_snapshot_arguments_and_the_fake_backends_refusal(sandbox: AsyncSandbox, raw: Any) -> None:
    for name in ("", "Upper", "has space", "-dash-first", "a" * 64, "slash/y"):
        with pytest.raises(InvalidArgument, match="snapshot name"):
            await sandbox.snapshot(name)
    for warm in (-1, 33):
        with pytest.raises(InvalidArgument, match="warm"):
            await sandbox.snapshot("fine", warm=warm)
    with pytest.raises(FailedPrecondition, match="cannot take snapshots"):
        await sandbox.snapshot("fine.v1-2_x", warm=1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        request = pb.CreateSnapshotRequest(sandbox_id=sandbox.id, name="fine")
        await raw.CreateSnapshot(request, metadata=(("authorization", f"Bearer {BETA_TOKEN}"),))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert (await sandbox.exec("echo still here")).stdout == "still here\n"


async def test_listing_and_deleting_snapshots(alpha: AsyncClient, target: str) -> None:
    assert await alpha.snapshots() == []
    with pytest.raises(NotFound, match="no snapshot 'nope'"):
        await alpha.delete_snapshot("nope")

    def sync_calls() -> None:
        with Client(target, token=ALPHA_TOKEN, timeout=30) as client:
            assert client.snapshots() == []
            with pytest.raises(NotFound):
                client.delete_snapshot("nope")
            with client.create("terminal", ttl_s=60, idle_timeout_s=None) as sb:
                assert sb.info.spec.idle_timeout_s is None
                assert sb.renew(10).expires_at <= time.time() + 10
                with pytest.raises(FailedPrecondition):
                    sb.snapshot("fine")
                with pytest.raises(NotFound):
                    sb.reset("nope")

    await asyncio.to_thread(sync_calls)


async def test_snapshot_routes_through_rest(api: httpx.AsyncClient, sandbox: AsyncSandbox) -> None:
    url = f"/v1/sandboxes/{sandbox.id}/snapshots"
    r = await api.post(url, json={"name": "fine"}, headers=ALPHA)
    error = error_of(r, 409)
    assert error["code"] == "failed_precondition" and "snapshot" in error["message"], error
    for bad in ({"name": "Bad Name"}, {"name": "fine", "warm": 99}, {"name": ""}, {}, {"name": "x", "extra": 1}):
        assert error_of(await api.post(url, json=bad, headers=ALPHA), 422)["code"] == "invalid_argument", bad
    assert error_of(await api.post(url, json={"name": "fine"}, headers=BETA), 404)["code"] == "not_found"
    assert error_of(await api.post(url, json={"name": "fine"}), 401)["code"] == "unauthenticated"

    r = await api.get("/v1/snapshots", headers=ALPHA)
    assert r.status_code == 200 and r.json() == {"snapshots": []}
    assert error_of(await api.get("/v1/snapshots"), 401)["code"] == "unauthenticated"
    r = await api.delete("/v1/snapshots/nope", headers=ALPHA)
    assert error_of(r, 404) == {"code": "not_found", "message": "no snapshot 'nope'"}

    paths = (await api.get("/openapi.json")).json()["paths"]
    assert {"/v1/sandboxes/{sandbox_id}/renew", "/v1/sandboxes/{sandbox_id}/snapshots", "/v1/snapshots"} <= set(paths)
    assert "/v1/snapshots/{name}" in paths
