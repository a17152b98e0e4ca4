"""What the ecosystem expects of a gRPC server: the standard health service (``grpc.health.v1``), fed by the
service's readiness (store and backend answer), and server reflection, so ``grpcurl`` and Kubernetes' gRPC
probes work without the proto file."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from sandbox.service import SandboxService
from sandbox.wire.grpc_gen import sandbox_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SandboxService"].full_name
READINESS_EVERY_S = 2.0


async def add_probes(server: grpc.aio.Server) -> HealthServicer:
    """Register health and reflection on ``server`` (before it starts). The server and the API start NOT_SERVING
    until the first readiness report: the stock servicer would call the server SERVING and answer NOT_FOUND for the
    API, which a probe or a client waiting for SERVING reads as an error, not as "not yet"."""
    health = HealthServicer()
    for name in ("", SERVICE_NAME):
        await health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    names = (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    return health


async def report_readiness(health: HealthServicer, service: SandboxService, *, logger: logging.Logger) -> None:
    """Keep the health status of "" and of the API service in step with the service's readiness (runs until
    cancelled)."""
    serving = None
    while True:
        failures = {name: why for name, why in (await service.readiness()).items() if why}
        now = not failures
        if now != serving:
            status = health_pb2.HealthCheckResponse.SERVING if now else health_pb2.HealthCheckResponse.NOT_SERVING
            for name in ("", SERVICE_NAME):
                await health.set(name, status)
            if serving is not None or not now:
                logger.warning("readiness: %s", "serving" if now else f"not serving ({failures})")
            serving = now
        await asyncio.sleep(READINESS_EVERY_S)


async def follow_readiness(
    server: grpc.aio.Server, health: HealthServicer, service: SandboxService, *, logger: logging.Logger
) -> None:
    """Report readiness until the server terminates."""
    reporting = asyncio.create_task(report_readiness(health, service, logger=logger))
    try:
        await server.wait_for_termination()
    finally:
        reporting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporting
