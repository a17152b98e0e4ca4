"""A running `sandbox server` answers the probes operators point at it: the standard gRPC health service and
reflection (what grpcurl and Kubernetes' grpc probes use) and REST /livez and /readyz."""

from __future__ import annotations

from pathlib import Path

import docker
import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.conftest import OWNER, RUN_ID, owned_by
from tests.docker.servers import ServerProcess
from tests.polling import eventually

pytestmark = pytest.mark.docker


async def test_health_reflection_livez_and_readyz_of_a_real_server(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    owner, sockets = f"{OWNER}-pr", f"/run/sbx-test-{RUN_ID}-pr"
    server = ServerProcess(tmp_path, owner=owner, socket_root=sockets)
    with owned_by(docker_client, owner, sockets):
        server.start()
        try:
            async with grpc.aio.insecure_channel(server.grpc_target) as channel:
                health = health_pb2_grpc.HealthStub(channel)

                async def serving() -> bool:
                    reply = await health.Check(health_pb2.HealthCheckRequest(service="sandbox.v1.SandboxService"))
                    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

                await eventually(serving, 15, "gRPC health SERVING")
                reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
                request = reflection_pb2.ServerReflectionRequest(list_services="")
                replies = [r async for r in reflect.ServerReflectionInfo(iter([request]))]
                names = {s.name for s in replies[0].list_services_response.service}
                assert {"sandbox.v1.SandboxService", "grpc.health.v1.Health"} <= names
            async with httpx.AsyncClient(base_url=server.http_url) as http:
                assert (await http.get("/livez")).status_code == 200
                ready = await http.get("/readyz")
                assert ready.status_code == 200, ready.text
                assert ready.json()["checks"] == {"store": "ok", "backend": "ok", "engine": "ok", "memory": "ok"}
        finally:
            server.stop()
