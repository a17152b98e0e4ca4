"""The control plane process: one service layer, served over gRPC and REST in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backends.base import Backend
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.factory import BackendConfig, make_backend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.capacity.quotas import QuotaBook
from sandbox.capacity.settings import CapacitySettings
from sandbox.errors import InvalidArgument
from sandbox.operator.settings import OperatorSettings
from sandbox.service import SandboxService, TokenRegistry
from sandbox.service.auth import is_structured, load_document
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.pools import PoolConfig
from sandbox.service.task_config import TaskSettings
from sandbox.store import EmbeddedStoreConfig, StoreConfig, open_store
from sandbox.trajectories import TrajectorySettings

if TYPE_CHECKING:
    from sandbox.operator.operator import Operator

LOOPBACK = "127.0.0.1"
BLOCKING_THREADS = 64
"""Threads of the loop's default executor, where every blocking call goes (engine API calls, claim files, file
copies). Python's default (CPU count + 4: 6 on 2 cores) let a few slow engine calls - a burst of pool refills -
hold every thread, so a claim's tiny file write queued behind them; engine calls block on I/O, not on a CPU. As
many as the docker backend's connection pool (``max_pool_size``, 64)."""


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str | None = Field(None, description="Address to bind; loopback unless tokens are configured.")
    grpc_port: int = Field(50051, ge=0, le=65535)
    http_port: int = Field(8080, ge=0, le=65535)
    public_url: str | None = Field(
        None,
        pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="The HTTP (REST) address callers reach the control plane at, e.g. https://sandbox.example.com "
        "behind a reverse proxy: preview URLs start with it. Unset: gRPC's use http://<host>:<http_port> (a wildcard "
        "host as the machine's name), REST's the address each caller used.",
    )
    tokens_file: str | None = Field(
        None,
        description="JSON {token: tenant | {tenant, admin}}, or {tokens: {...}, quotas: {tenant: quota}, "
        "default_quota: quota} (docs/capacity.md).",
    )
    backend: BackendConfig = Field(default_factory=DockerConfig)
    store: StoreConfig = Field(default_factory=EmbeddedStoreConfig)
    pools: list[PoolConfig] = Field(default_factory=list, description="Warm pools kept by the leader replica.")
    lifecycle: LifecycleSettings = Field(default_factory=LifecycleSettings)
    operator: OperatorSettings = Field(
        default_factory=OperatorSettings, description="Kubernetes only: Sandbox and SandboxPool objects."
    )
    tasks: TaskSettings = Field(
        default_factory=TaskSettings, description="Fixtures of task downloads, warm replicas, task snapshot collection."
    )
    trajectories: TrajectorySettings = Field(default_factory=TrajectorySettings, description="Where episodes go.")
    capacity: CapacitySettings = Field(
        default_factory=CapacitySettings,
        description="What the host holds and who waits when it is full (docs/capacity.md).",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_address(settings: ServerSettings, tokens: TokenRegistry, logger: logging.Logger) -> str:
    if tokens.enabled:
        return settings.host or "0.0.0.0"
    host = settings.host or LOOPBACK
    if not _is_loopback(host):
        raise InvalidArgument(
            f"refusing to listen on {host} with no tokens configured: set SANDBOX_TOKENS_FILE or --tokens-file"
        )
    logger.warning("no tokens configured: listening on loopback only (%s), every caller is the admin", host)
    return host


def _make_operator(
    settings: ServerSettings, service: SandboxService, lifecycle: Lifecycle, backend: Backend, logger: logging.Logger
) -> Operator | None:
    """With the kubernetes backend: the operator's loop (Sandbox and SandboxPool objects), else None. Imported here
    only: a Docker control plane never imports the Kubernetes client."""
    if not (settings.operator.enabled and isinstance(settings.backend, KubernetesConfig)):
        return None
    from sandbox.backends.kubernetes.backend import KubernetesBackend
    from sandbox.operator.operator import Operator

    assert isinstance(backend, KubernetesBackend)
    return Operator(service, lifecycle, backend, settings=settings.operator, pools=list(settings.pools), logger=logger)


CONTROL_PLANE_OOM_SCORE_ADJ = -900
"""The control plane is among the last the kernel's OOM killer picks (sandboxes are first: +500)."""


def protect_from_oom(logger: logging.Logger, path: str = "/proc/self/oom_score_adj") -> bool:
    """Lower this process's OOM score (root or CAP_SYS_RESOURCE may; otherwise say so and go on)."""
    try:
        with open(path, "w") as f:
            f.write(str(CONTROL_PLANE_OOM_SCORE_ADJ))
    except OSError as e:
        logger.warning("could not lower the control plane's OOM score (%s): the kernel may pick it before sandboxes", e)
        return False
    return True


def _embedded_uvicorn(uvicorn: Any, config: Any) -> Any:
    """A uvicorn server that leaves signal handling to us (we also stop gRPC and the service)."""

    class EmbeddedServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return EmbeddedServer(config)


async def serve(settings: ServerSettings, *, logger: logging.Logger, ready: asyncio.Event | None = None) -> None:
    import uvicorn

    from sandbox.api.grpc.server import start_grpc_server
    from sandbox.api.grpc.step_streams import StepStreams
    from sandbox.api.rest import create_app
    from sandbox.service.preview import PreviewLinks, http_base_url
    from sandbox.service.tickets import TicketIssuer, shared_ticket_secret

    protect_from_oom(logger)
    document = load_document(settings.tokens_file)
    tokens = TokenRegistry.from_mapping(document)
    quotas = QuotaBook.from_document(document) if is_structured(document) else QuotaBook()
    host = bind_address(settings, tokens, logger)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(max_workers=BLOCKING_THREADS, thread_name_prefix="blocking")
    )
    store = await open_store(settings.store, logger=logger)
    backend = make_backend(settings.backend)
    state_path = settings.store.path if isinstance(settings.store, EmbeddedStoreConfig) else None
    trajectories = settings.trajectories.open(state_path)
    service = SandboxService(
        backend,
        store,
        logger=logger,
        tasks=settings.tasks,
        trajectories=trajectories,
        capacity=settings.capacity,
        quotas=quotas,
    )
    await service.start()
    for pool in settings.pools:
        service.admission.check_warm_request(pool.spec, pool.min)  # a pool the warm share can never hold: say so
        service.pools.add(
            pool.spec, backend.image_for(pool.spec), min=pool.min, max=pool.max, max_starting=pool.max_starting
        )
    lifecycle = Lifecycle(service, settings.lifecycle, logger=logger)
    lifecycle_task = asyncio.create_task(lifecycle.run())
    operator = _make_operator(settings, service, lifecycle, backend, logger)
    operator_task = asyncio.create_task(operator.run()) if operator is not None else None
    tickets = TicketIssuer(await shared_ticket_secret(store))
    # gRPC mints preview URLs with the REST proxy's ticket issuer, on the HTTP address callers reach.
    preview = PreviewLinks(tickets, settings.public_url or http_base_url(host, settings.http_port))
    step_streams = StepStreams()
    grpc_server = await start_grpc_server(
        service, tokens, host=host, port=settings.grpc_port, logger=logger, preview=preview, step_streams=step_streams
    )
    app = create_app(service, tokens, logger=logger, tickets=tickets, public_url=settings.public_url)
    # log_config=None: uvicorn's records go through our handler (JSON or text), not a format of its own.
    config = uvicorn.Config(
        app, host=host, port=settings.http_port, log_level="warning", log_config=None, lifespan="off"
    )
    http_server = _embedded_uvicorn(uvicorn, config)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    http_task = asyncio.create_task(http_server.serve())
    while not http_server.started and not http_task.done():  # noqa: ASYNC110 - uvicorn offers no started event
        await asyncio.sleep(0.02)
    if http_task.done():
        lifecycle_task.cancel()
        if operator_task is not None:
            operator_task.cancel()
        await grpc_server.stop(None)
        await service.close()
        await store.close()
        http_task.result()
        raise InvalidArgument(f"the HTTP server could not start on {host}:{settings.http_port}")
    if not settings.public_url and not settings.http_port:  # port 0: the one the HTTP server got
        preview.base_url = http_base_url(host, http_server.servers[0].sockets[0].getsockname()[1])
    logger.info("control plane up: gRPC on %s:%s, HTTP on %s:%s", host, settings.grpc_port, host, settings.http_port)
    logger.info("preview URLs minted over gRPC start with %s (the public_url setting changes it)", preview.base_url)
    if ready is not None:
        ready.set()
    try:
        await asyncio.wait([http_task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    finally:
        http_server.should_exit = True
        step_streams.end()
        await grpc_server.stop(grace=5)
        with contextlib.suppress(asyncio.CancelledError):
            await http_task
        if operator is not None and operator_task is not None:
            operator_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await operator_task
            await operator.close()
        lifecycle_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lifecycle_task
        await lifecycle.leave()
        await service.close()
        await store.close()
        logger.info("control plane stopped")
