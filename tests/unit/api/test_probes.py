"""Probes the way the ecosystem expects: grpc.health.v1 fed by readiness, server reflection (what grpcurl uses),
REST /livez and /readyz — on the fake backend, including a backend that stops answering."""

from __future__ import annotations

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from sandbox.api.grpc.probes import add_probes
from sandbox.errors import Unavailable
from sandbox.service import SandboxService
from tests.polling import eventually

API = "sandbox.v1.SandboxService"


async def _health(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
        return int(reply.status)


async def test_health_is_serving_for_the_server_and_the_api(target: str) -> None:
    serving = health_pb2.HealthCheckResponse.SERVING
    await eventually(lambda: _is(target, serving), 10, "the first readiness report")
    assert await _health(target, "") == serving


async def test_reflection_lists_the_api_and_describes_its_methods(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=API),
        ]
        replies = [reply async for reply in stub.ServerReflectionInfo(iter(requests))]
    services = {s.name for s in replies[0].list_services_response.service}
    assert {API, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(raw)
        for raw in replies[1].file_descriptor_response.file_descriptor_proto
    ]
    methods = {m.name for f in files for s in f.service for m in s.method}
    assert {"Step", "CreateSandbox", "Observe"} <= methods


async def test_livez_and_readyz(api: httpx.AsyncClient) -> None:
    assert (await api.get("/livez")).json() == {"ok": True}
    ready = await api.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {
        "ready": True,
        "checks": {"store": "ok", "backend": "ok", "engine": "ok", "memory": "ok"},
    }


async def test_a_backend_that_does_not_answer_makes_the_replica_not_ready(
    service: SandboxService, api: httpx.AsyncClient, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down() -> None:
        raise Unavailable("the engine does not answer (forced by the test)")

    monkeypatch.setattr(service.backend, "ping", down)
    ready = await api.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"] == {
        "store": "ok",
        "backend": "the engine does not answer (forced by the test)",
        "engine": "ok",
        "memory": "ok",
    }
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    await eventually(lambda: _is(target, not_serving), 10, "gRPC health turning NOT_SERVING")
    monkeypatch.undo()
    await eventually(lambda: _is(target, health_pb2.HealthCheckResponse.SERVING), 10, "gRPC health serving again")


async def _is(target: str, status: int) -> bool:
    return await _health(target, API) == status


async def test_before_the_first_readiness_report_the_api_is_not_serving_rather_than_unknown() -> None:
    server = grpc.aio.server()
    await add_probes(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        target = f"127.0.0.1:{port}"
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        assert await _health(target, "") == not_serving
        assert await _health(target, API) == not_serving
    finally:
        await server.stop(None)
