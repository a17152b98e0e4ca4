"""A rollout group in one call: ``create_group`` makes ``count`` sandboxes of one spec at once, through the SDK
(gRPC) and REST, on the fake backend. All of them or none: a create that fails, or a caller that gives up, leaves
no sandbox behind."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import httpx
import pytest

from sandbox.capacity.admission import Grant
from sandbox.client import AsyncClient
from sandbox.errors import InvalidArgument, Unavailable
from sandbox.models import GROUP_MAX, SandboxInfo, SandboxSpec
from sandbox.service import SandboxService
from sandbox.service.auth import Principal
from sandbox.wire import convert
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc
from tests.polling import eventually
from tests.unit.conftest import ALPHA, ALPHA_TOKEN

ALICE = Principal("alpha")


async def _ids_labelled(service: SandboxService, label: str) -> set[str]:
    return {info.id for info in await service.list_sandboxes(ALICE) if info.spec.labels.get("t") == label}


async def test_a_group_is_count_distinct_running_sandboxes_of_its_spec(alpha: AsyncClient) -> None:
    group = await alpha.create_group(3, "terminal", labels={"t": "group"})
    try:
        assert len({sb.id for sb in group}) == 3
        for i, sb in enumerate(group):
            assert sb.info.spec.labels == {"t": "group"}
            assert (await sb.exec(f"echo {i}")).stdout == f"{i}\n"
    finally:
        for sb in group:
            await sb.close()


@pytest.mark.parametrize("count", [0, -1, GROUP_MAX + 1, 2.0, True])
async def test_the_sdk_refuses_a_count_out_of_range_before_any_call(alpha: AsyncClient, count: Any) -> None:
    with pytest.raises(InvalidArgument, match="count must be"):
        await alpha.create_group(count, "terminal")


@pytest.mark.parametrize("count", [0, GROUP_MAX + 1])
async def test_the_server_refuses_a_count_out_of_range(target: str, count: int) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SandboxServiceStub(channel)
        spec = convert.spec_to_proto(SandboxSpec(kind="terminal"))
        request = pb.CreateSandboxesRequest(spec=spec, count=count)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CreateSandboxes(request, metadata=(("authorization", f"Bearer {ALPHA_TOKEN}"),))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "count must be 1 to" in (refused.value.details() or "")


async def test_when_one_create_fails_the_group_fails_with_its_error_and_leaves_nothing(
    service: SandboxService, alpha: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_create = service.leases._create
    calls = 0

    async def third_fails(principal: Principal, spec: SandboxSpec, image: str, grant: Grant) -> SandboxInfo:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise Unavailable("the engine did not answer (forced by the test)")
        return await real_create(principal, spec, image, grant)

    monkeypatch.setattr(service.leases, "_create", third_fails)
    with pytest.raises(Unavailable, match="forced by the test"):
        await alpha.create_group(4, "terminal", labels={"t": "group-fails"})
    assert calls == 4
    assert await _ids_labelled(service, "group-fails") == set(), "a failed group left sandboxes behind"


async def test_a_group_given_up_midway_deletes_what_its_creates_made(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_create = service.leases._create
    made, release = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def slow_second(principal: Principal, spec: SandboxSpec, image: str, grant: Grant) -> SandboxInfo:
        info = await real_create(principal, spec, image, grant)
        done.append(info.id)
        if len(done) == 2:
            made.set()
            await release.wait()  # the caller gives up while this one is still being made
        return info

    monkeypatch.setattr(service.leases, "_create", slow_second)
    spec = SandboxSpec(kind="terminal", labels={"t": "group-cancelled"})
    group = asyncio.ensure_future(service.create_group(ALICE, spec, 3))
    await made.wait()
    group.cancel()
    with pytest.raises(asyncio.CancelledError):
        await group
    assert await _ids_labelled(service, "group-cancelled"), "the creates stopped with the call"
    release.set()

    async def none_left() -> bool:
        return not await _ids_labelled(service, "group-cancelled")

    await eventually(none_left, 10, "every sandbox of the group deleted")
    assert len(done) == 3


async def test_rest_makes_a_group_and_refuses_a_bad_count(service: SandboxService, api: httpx.AsyncClient) -> None:
    made = await api.post("/v1/sandboxes:group", json={"spec": {"kind": "terminal"}, "count": 2}, headers=ALPHA)
    assert made.status_code == 201, made.text
    ids = [info["id"] for info in made.json()["sandboxes"]]
    try:
        assert len(set(ids)) == 2
        for sandbox_id in ids:
            assert (await api.get(f"/v1/sandboxes/{sandbox_id}", headers=ALPHA)).json()["state"] == "running"
    finally:
        for sandbox_id in ids:
            await api.delete(f"/v1/sandboxes/{sandbox_id}", headers=ALPHA)
    refused = await api.post("/v1/sandboxes:group", json={"spec": {"kind": "terminal"}, "count": 0}, headers=ALPHA)
    assert refused.status_code == 422, refused.text
