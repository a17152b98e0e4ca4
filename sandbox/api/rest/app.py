"""The REST app: the routes, the error handlers, the body limits and the web view, over one service."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request, Response

from sandbox import __version__
from sandbox.api.preview.proxy import mount_preview
from sandbox.api.rest import context, routes, trajectory_routes
from sandbox.api.rest.bodies import Ok, Readiness
from sandbox.api.rest.errors import add_error_handlers
from sandbox.api.rest.limits import BodyLimit
from sandbox.api.web.view import mount_webview
from sandbox.service import SandboxService, TokenRegistry
from sandbox.service.tickets import TicketIssuer


def create_app(
    service: SandboxService,
    tokens: TokenRegistry,
    *,
    logger: logging.Logger,
    tickets: TicketIssuer | None = None,
    public_url: str | None = None,
) -> FastAPI:
    """The REST API over ``service``. OpenAPI at ``/openapi.json``, docs at ``/docs``. Preview URLs start with
    ``public_url`` when it is set, else with the address each caller used."""
    app = FastAPI(
        title="Sandbox platform",
        version=__version__,
        description="Desktop, browser, android and terminal sandboxes behind one step/observe/reset API.",
    )
    context.install(app, context.Context(service, tokens, logger))
    add_error_handlers(app)
    app.add_middleware(BodyLimit, metrics=service.metrics)

    @app.get("/healthz", tags=["inspection"])
    @app.get("/livez", tags=["inspection"])
    async def livez() -> Ok:
        """Liveness of the control plane process itself (it answers); needs no token."""
        return Ok()

    @app.get(
        "/readyz",
        tags=["inspection"],
        responses={
            503: {
                "model": Readiness,
                "description": "The store or the backend does not answer, the engine is overloaded, or the host is "
                "under memory pressure.",
            }
        },
    )
    async def readyz(response: Response) -> Readiness:
        """Ready to serve: the state store and the backend both answer, the engine is not overloaded and the host not
        under memory pressure (each with hysteresis). Needs no token."""
        checks = await service.readiness()
        ready = not any(checks.values())
        if not ready:
            response.status_code = 503
        return Readiness(ready=ready, checks={name: why or "ok" for name, why in checks.items()})

    @app.get("/metrics", tags=["inspection"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this replica; needs no token (counts only: no sandbox ids; tenants label only the
        capacity and quota series)."""
        await service.refresh_metrics()
        body, content_type = service.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    app.include_router(routes.router())
    app.include_router(trajectory_routes.router(routes.API_PREFIX))
    tickets = tickets or TicketIssuer()
    mount_webview(app, service=service, tokens=tokens, tickets=tickets, logger=logger)
    mount_preview(app, service=service, tokens=tokens, tickets=tickets, logger=logger, public_url=public_url)
    return app
