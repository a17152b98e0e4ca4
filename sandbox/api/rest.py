"""The REST skin over the service layer: JSON over HTTP under ``/v1``.

The routes translate and call the service, nothing else. Bodies are the models of
``sandbox.models``; every error leaves as ``{"error": {"code", "message"}}`` with the HTTP
status ``sandbox.api.errors.http_status`` gives it. Bad input is a 4xx and never a 500: a
500 means a bug, and is logged with its traceback.

Authentication: ``Authorization: Bearer <token>``, resolved by the ``TokenRegistry``.
Binary payloads (file contents, ``/screenshot``) travel as raw bodies; a screenshot inside
a JSON ``Observation`` is URL-safe base64.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandbox import __version__
from sandbox.api.convert import Renewal
from sandbox.api.errors import grpc_status, grpc_status_of_http, http_status
from sandbox.api.webview import mount_webview
from sandbox.errors import SandboxError, Unauthenticated
from sandbox.models import (
    Action,
    Exec,
    ExecResult,
    FileInfo,
    Health,
    Model,
    Observation,
    SandboxInfo,
    SandboxSpec,
    SnapshotInfo,
)
from sandbox.observability.metrics import Metrics
from sandbox.protocol import MAX_BLOB_BYTES, MAX_HEADER_BYTES
from sandbox.service.auth import Principal, TokenRegistry
from sandbox.service.sandboxes import SandboxService
from sandbox.service.tickets import TicketIssuer

API_PREFIX = "/v1"
MAX_JSON_BODY_BYTES = MAX_HEADER_BYTES // 2
"""A JSON body becomes (most of) one agent frame header: stay well inside that frame's limit."""
MAX_UPLOAD_BYTES = MAX_BLOB_BYTES
"""A file upload travels to the agent as one frame blob."""
MAX_OFFSET = 1 << 62
MAX_LOG_TAIL = 100_000
MAX_PATH_CHARS = 4096
_OCTAL_MODE = r"^(0o|0)?[0-7]{1,4}$"
_STATE_KEY = "sandbox_api"
_MAX_REPORTED_ERRORS = 10

# Codes for the errors the HTTP layer raises itself (unknown route, wrong method, unreadable body).
_HTTP_CODES = {400: "invalid_argument", 404: "not_found", 405: "method_not_allowed", 413: "resource_exhausted"}
TRANSPORT = "rest"


# --------------------------------------------------------------------------- bodies of the REST skin only


class StepRequest(Model):
    action: Action
    screenshot: bool = False


class ErrorDetail(Model):
    code: str
    message: str


class ErrorBody(Model):
    error: ErrorDetail


class SandboxList(Model):
    sandboxes: list[SandboxInfo]


class ResetRequest(Model):
    snapshot: str | None = Field(
        None, description="Reset to this snapshot of yours (kept as the sandbox's start from then on)."
    )


class SnapshotRequest(Model):
    name: str = Field(description="1-63 of [a-z0-9_.-], starting with a letter or digit.")
    warm: int = Field(0, description="Replicas to keep running (0-32) so a reset to the snapshot takes no start.")


class SnapshotList(Model):
    snapshots: list[SnapshotInfo]


class FileList(Model):
    entries: list[FileInfo]


class FileWritten(Model):
    path: str
    size: int


class ActionList(Model):
    actions: list[dict[str, Any]]


class Ok(Model):
    ok: bool = True


# --------------------------------------------------------------------------- dependencies


@dataclass(frozen=True)
class _Context:
    service: SandboxService
    tokens: TokenRegistry
    logger: logging.Logger


def _context(request: Request) -> _Context:
    context = getattr(request.app.state, _STATE_KEY)
    assert isinstance(context, _Context)
    return context


_bearer = HTTPBearer(auto_error=False, description="A token from the server's token file.")


async def _caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    if credentials is None and request.headers.get("authorization"):
        raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
    return _context(request).tokens.authenticate(credentials.credentials if credentials else None)


async def _service(request: Request) -> SandboxService:
    return _context(request).service


Caller = Annotated[Principal, Depends(_caller)]
Service = Annotated[SandboxService, Depends(_service)]
FilePath = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="Path inside the sandbox; a relative path is taken from the sandbox's workspace.",
    ),
]
ImageFormat = Annotated[Literal["png", "jpeg"], Query(description="Image encoding.")]
Quality = Annotated[int, Query(ge=1, le=100, description="JPEG quality (ignored for png).")]


# --------------------------------------------------------------------------- errors


def _error(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}, **extra}, status_code=status, headers=headers)


def _count_error(request: Request, code: str) -> None:
    _context(request).service.metrics.api_error(TRANSPORT, _route_name(request.scope), code)


def _route_name(scope: Scope) -> str:
    """The route's template (``POST /v1/sandboxes/{sandbox_id}/exec``), never the path itself: a label must not
    take a sandbox id, or any path a caller makes up."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return f"{scope.get('method', '')} {template}" if template else "unmatched"


async def _on_sandbox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SandboxError)
    status = http_status(exc)
    _count_error(request, grpc_status(exc).name)
    if status >= 500:
        _context(request).logger.warning(
            "%s %s failed: %s: %s",
            request.method,
            request.url.path,
            exc.code,
            exc.message,
            extra={"code": exc.code, "transport": TRANSPORT},
        )
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return _error(status, exc.code, exc.message, headers=headers)


def _describe(errors: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """A readable message naming the bad fields, and a JSON-safe detail list (no echo of the input)."""
    parts: list[str] = []
    detail: list[dict[str, Any]] = []
    for err in errors:
        loc = [p if isinstance(p, int) else str(p) for p in err.get("loc", ())]
        msg = str(err.get("msg", "invalid"))
        ctx = err.get("ctx") or {}
        if isinstance(ctx, dict) and isinstance(ctx.get("error"), str) and err.get("type") == "json_invalid":
            msg = f"{msg}: {ctx['error']}"
        detail.append({"loc": loc, "msg": msg, "type": str(err.get("type", "value_error"))})
        if len(parts) < _MAX_REPORTED_ERRORS:
            parts.append(f"{'.'.join(str(p) for p in loc) or 'request'}: {msg}")
    more = len(errors) - len(parts)
    message = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    return message or "the request is not valid", detail


async def _on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    _count_error(request, "INVALID_ARGUMENT")
    message, detail = _describe(list(exc.errors()))
    return _error(422, "invalid_argument", message, detail=detail)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    status = grpc_status_of_http(exc.status_code)
    _count_error(request, status.name if status is not None else "UNKNOWN")
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 400 and exc.__cause__ is not None:  # an unreadable body: say why
        message = f"{message}: {type(exc.__cause__).__name__}"
    return _error(exc.status_code, code, message, headers=exc.headers)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    """Backstop for a failure outside any route (the routes catch their own: see ``_Route``)."""
    _count_error(request, "INTERNAL")
    _context(request).logger.error(
        "unhandled error in %s %s",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"code": "internal", "transport": TRANSPORT},
    )
    return _error(500, "internal", "internal error; the server log has the details")


class _Route(APIRoute):
    """A route that turns an unexpected exception into a logged 500, so it never escapes the app."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except (SandboxError, HTTPException, RequestValidationError):
                raise  # the app's exception handlers answer these
            except Exception as e:
                return await _on_unexpected(request, e)

        return guarded


class _BodyLimit:
    """Refuse request bodies over the limit with 413 before they are buffered: the declared
    Content-Length up front, a chunked body as it streams in."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope["method"] == "PUT" and str(scope["path"]).endswith("/files/content")
        limit = MAX_UPLOAD_BYTES if upload else MAX_JSON_BODY_BYTES
        what = "a file upload" if upload else "a JSON body"
        too_large = f"{what} may be at most {limit} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                # Before routing: no route name yet.
                self.metrics.api_error(TRANSPORT, "unmatched", "RESOURCE_EXHAUSTED")
                await _error(413, "resource_exhausted", too_large)(scope, receive, send)
                return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise HTTPException(413, too_large)
            return message

        await self.app(scope, counting_receive, send)


# --------------------------------------------------------------------------- routes


def _routes() -> APIRouter:
    router = APIRouter(
        prefix=API_PREFIX,
        route_class=_Route,
        responses={
            401: {"model": ErrorBody, "description": "No or bad bearer token."},
            404: {"model": ErrorBody, "description": "No such sandbox (or not yours), or no such file."},
            422: {"model": ErrorBody, "description": "Invalid input; the message names the field."},
        },
    )

    # ------------------------------------------------------------------ lifecycle

    @router.post("/sandboxes", status_code=201, tags=["sandboxes"])
    async def create_sandbox(spec: SandboxSpec, caller: Caller, service: Service) -> SandboxInfo:
        return await service.create(caller, spec)

    @router.get("/sandboxes", tags=["sandboxes"])
    async def list_sandboxes(caller: Caller, service: Service) -> SandboxList:
        return SandboxList(sandboxes=await service.list_sandboxes(caller))

    @router.get("/sandboxes/{sandbox_id}", tags=["sandboxes"])
    async def get_sandbox(sandbox_id: str, caller: Caller, service: Service) -> SandboxInfo:
        return await service.get(caller, sandbox_id)

    @router.delete("/sandboxes/{sandbox_id}", status_code=204, response_class=Response, tags=["sandboxes"])
    async def delete_sandbox(sandbox_id: str, caller: Caller, service: Service) -> Response:
        await service.delete(caller, sandbox_id)
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/reset", tags=["sandboxes"])
    async def reset_sandbox(
        sandbox_id: str, caller: Caller, service: Service, body: Annotated[ResetRequest | None, Body()] = None
    ) -> SandboxInfo:
        """Back to the initial state; the body (optional) names a snapshot to reset to instead."""
        snapshot = body.snapshot if body is not None else None
        return await service.reset(caller, sandbox_id, snapshot=snapshot)

    @router.post(
        "/sandboxes/{sandbox_id}/renew",
        responses={409: {"model": ErrorBody, "description": "The sandbox's lease has already ended."}},
        tags=["sandboxes"],
    )
    async def renew_sandbox(
        sandbox_id: str, caller: Caller, service: Service, body: Annotated[Renewal | None, Body()] = None
    ) -> SandboxInfo:
        """Extend the lease: the sandbox now expires ``ttl_s`` (default: its spec's) from now."""
        ttl_s = body.ttl_s if body is not None else None
        return await service.renew(caller, sandbox_id, ttl_s=ttl_s)

    # ------------------------------------------------------------------ snapshots

    @router.post(
        "/sandboxes/{sandbox_id}/snapshots",
        status_code=201,
        responses={409: {"model": ErrorBody, "description": "The sandbox or its backend cannot be snapshotted."}},
        tags=["snapshots"],
    )
    async def create_snapshot(sandbox_id: str, body: SnapshotRequest, caller: Caller, service: Service) -> SnapshotInfo:
        """Keep the sandbox's file system (and a desktop's GUI apps) as a snapshot of yours."""
        return await service.snapshot(caller, sandbox_id, body.name, warm=body.warm)

    @router.get("/snapshots", tags=["snapshots"])
    async def list_snapshots(caller: Caller, service: Service) -> SnapshotList:
        return SnapshotList(snapshots=await service.list_snapshots(caller))

    @router.delete("/snapshots/{name}", status_code=204, response_class=Response, tags=["snapshots"])
    async def delete_snapshot(name: str, caller: Caller, service: Service) -> Response:
        await service.delete_snapshot(caller, name)
        return Response(status_code=204)

    # ------------------------------------------------------------------ acting

    @router.post("/sandboxes/{sandbox_id}/step", tags=["acting"])
    async def step(sandbox_id: str, body: StepRequest, caller: Caller, service: Service) -> Observation:
        return await service.step(caller, sandbox_id, body.action, screenshot=body.screenshot)

    @router.get("/sandboxes/{sandbox_id}/observe", tags=["acting"])
    async def observe(
        sandbox_id: str, caller: Caller, service: Service, format: ImageFormat = "png", quality: Quality = 80
    ) -> Observation:
        return await service.observe(caller, sandbox_id, format=format, quality=quality)

    @router.get(
        "/sandboxes/{sandbox_id}/screenshot",
        response_class=Response,
        responses={200: {"content": {"image/png": {}, "image/jpeg": {}}, "description": "The raw image."}},
        tags=["acting"],
    )
    async def screenshot(
        sandbox_id: str, caller: Caller, service: Service, format: ImageFormat = "png", quality: Quality = 80
    ) -> Response:
        shot = await service.screenshot(caller, sandbox_id, format=format, quality=quality)
        return Response(
            shot.data,
            media_type=f"image/{shot.format}",
            headers={"X-Screen-Width": str(shot.width), "X-Screen-Height": str(shot.height)},
        )

    @router.post("/sandboxes/{sandbox_id}/exec", tags=["acting"])
    async def exec_command(sandbox_id: str, request: Exec, caller: Caller, service: Service) -> ExecResult:
        return await service.exec(caller, sandbox_id, request)

    # ------------------------------------------------------------------ files

    @router.get("/sandboxes/{sandbox_id}/files", tags=["files"])
    async def list_files(sandbox_id: str, path: FilePath, caller: Caller, service: Service) -> FileList:
        return FileList(entries=await service.list_files(caller, sandbox_id, path))

    @router.get(
        "/sandboxes/{sandbox_id}/files/content",
        response_class=Response,
        responses={200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes."}},
        tags=["files"],
    )
    async def read_file(
        sandbox_id: str,
        path: FilePath,
        caller: Caller,
        service: Service,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
        length: Annotated[
            int | None, Query(ge=0, le=MAX_OFFSET, description="Bytes to read; to the end if unset.")
        ] = None,
    ) -> Response:
        data = await service.read_file(caller, sandbox_id, path, offset=offset, length=length)
        return Response(data, media_type="application/octet-stream")

    @router.put(
        "/sandboxes/{sandbox_id}/files/content",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
            }
        },
        tags=["files"],
    )
    async def write_file(
        sandbox_id: str,
        path: FilePath,
        request: Request,
        caller: Caller,
        service: Service,
        mode: Annotated[
            str, Query(pattern=_OCTAL_MODE, description="Permissions in octal, e.g. 644 or 0o755.")
        ] = "644",
        append: bool = False,
    ) -> FileWritten:
        data = await request.body()
        permissions = int(mode.removeprefix("0o"), 8)
        size = await service.write_file(caller, sandbox_id, path, data, mode=permissions, append=append)
        return FileWritten(path=path, size=size)

    @router.delete("/sandboxes/{sandbox_id}/files", status_code=204, response_class=Response, tags=["files"])
    async def delete_file(
        sandbox_id: str, path: FilePath, caller: Caller, service: Service, recursive: bool = False
    ) -> Response:
        await service.delete_file(caller, sandbox_id, path, recursive=recursive)
        return Response(status_code=204)

    # ------------------------------------------------------------------ inspection

    @router.get("/sandboxes/{sandbox_id}/health", tags=["inspection"])
    async def health(sandbox_id: str, caller: Caller, service: Service) -> Health:
        return await service.health(caller, sandbox_id)

    @router.get("/sandboxes/{sandbox_id}/logs", response_class=PlainTextResponse, tags=["inspection"])
    async def logs(
        sandbox_id: str, caller: Caller, service: Service, tail: Annotated[int, Query(ge=0, le=MAX_LOG_TAIL)] = 200
    ) -> PlainTextResponse:
        return PlainTextResponse(await service.logs(caller, sandbox_id, tail=tail))

    @router.get("/sandboxes/{sandbox_id}/actions", tags=["inspection"])
    async def recent_actions(sandbox_id: str, caller: Caller, service: Service) -> ActionList:
        return ActionList(actions=await service.recent_actions(caller, sandbox_id))

    return router


def create_app(
    service: SandboxService, tokens: TokenRegistry, *, logger: logging.Logger, tickets: TicketIssuer | None = None
) -> FastAPI:
    """The REST API over ``service``. OpenAPI at ``/openapi.json``, docs at ``/docs``."""
    app = FastAPI(
        title="Sandbox platform",
        version=__version__,
        description="Desktop, browser, android and terminal sandboxes behind one step/observe/reset API.",
    )
    setattr(app.state, _STATE_KEY, _Context(service, tokens, logger))
    app.router.route_class = _Route
    app.add_exception_handler(SandboxError, _on_sandbox_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(HTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_middleware(_BodyLimit, metrics=service.metrics)

    @app.get("/healthz", tags=["inspection"])
    async def healthz() -> Ok:
        """Liveness of the control plane itself; needs no token."""
        return Ok()

    @app.get("/metrics", tags=["inspection"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this replica; needs no token (counts only: no sandbox ids, no tenants)."""
        await service.refresh_metrics()
        body, content_type = service.metrics.render(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    app.include_router(_routes())
    mount_webview(app, service=service, tokens=tokens, tickets=tickets or TicketIssuer(), logger=logger)
    return app
