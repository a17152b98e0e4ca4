"""How the REST skin answers errors: ``{"error": {"code", "message"}}`` with the status of
:mod:`sandbox.wire.status`, each counted once in ``sandbox_api_errors_total`` under its gRPC
status name (one vocabulary across both transports)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import Scope

from sandbox.api.rest.context import TRANSPORT, context_of
from sandbox.capacity.admission import RETRY_AFTER_S
from sandbox.errors import SandboxError
from sandbox.wire.status import error_code_of_http, grpc_status, grpc_status_of_http, http_status

_MAX_REPORTED_ERRORS = 10
_METHOD_NOT_ALLOWED = 405
_HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def error_response(
    status: int, code: str, message: str, *, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}, **extra}, status_code=status, headers=headers)


def step_error(request: Request, error: SandboxError) -> dict[str, str]:
    """The error body of one failed step in a batch (the call itself succeeded), counted as an error of its route."""
    _counted(request, error, what="a step of ", cause=error.__cause__)
    return {"code": error.code, "message": error.message}


def grpc_name_of_http(status: int) -> str:
    """The label an error of HTTP ``status`` is counted under: its gRPC status's name (``UNKNOWN``: none)."""
    code = grpc_status_of_http(status)
    return code.name if code is not None else "UNKNOWN"


def _count_error(request: Request, code: str) -> None:
    context_of(request).service.metrics.api_error(TRANSPORT, _route_name(request.scope), code)


def _route_name(scope: Scope) -> str:
    """The route's template (``POST /v1/sandboxes/{sandbox_id}/exec``), never the path itself: a label must not
    take a sandbox id, or any path a caller makes up."""
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    return f"{scope.get('method', '')} {template}" if template else "unmatched"


async def _on_sandbox_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SandboxError)
    status = _counted(request, exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 429:
        headers = {"Retry-After": str(int(RETRY_AFTER_S))}
    return error_response(status, exc.code, exc.message, headers=headers)


def _counted(request: Request, error: SandboxError, *, what: str = "", cause: BaseException | None = None) -> int:
    """``error``'s HTTP status, the error counted under its gRPC status's name and, when the fault is the server's
    (5xx), logged: a failed call's, or (``what``) a batch's step's."""
    status = http_status(error)
    _count_error(request, grpc_status(error).name)
    if status >= 500:
        context_of(request).logger.warning(
            "%s%s %s failed: %s: %s",
            what,
            request.method,
            request.url.path,
            error.code,
            error.message,
            exc_info=cause,
            extra={"code": error.code, "transport": TRANSPORT},
        )
    return status


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
    status = 422
    _count_error(request, grpc_name_of_http(status))
    message, detail = _describe(list(exc.errors()))
    return error_response(status, error_code_of_http(status), message, detail=detail)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=exc.headers)
    _count_error(request, grpc_name_of_http(exc.status_code))
    message = str(exc.detail)
    if exc.status_code == 400 and exc.__cause__ is not None:  # an unreadable body: say why
        message = f"{message}: {type(exc.__cause__).__name__}"
    headers = exc.headers
    allowed = _documented_methods(request) if exc.status_code == _METHOD_NOT_ALLOWED else None
    if allowed:
        headers = {**(headers or {}), "Allow": ", ".join(allowed)}
    return error_response(exc.status_code, error_code_of_http(exc.status_code), message, headers=headers)


def _documented_methods(request: Request) -> list[str]:
    """The methods the OpenAPI document lists at the request's path (empty for a path it does not list).
    Starlette's own ``Allow`` names the first matching route's methods only, and a path such as
    ``/v1/sandboxes/{sandbox_id}`` has a route per method."""
    path = request.scope.get("path", "")
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        if _template_regex(template).fullmatch(path):
            methods |= {method.upper() for method in operations if method in _HTTP_METHODS}
    return sorted(methods)


@functools.lru_cache(maxsize=256)
def _template_regex(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)))


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    """Backstop for a failure outside any route (the routes catch their own: see :class:`GuardedRoute`)."""
    _count_error(request, "INTERNAL")
    context_of(request).logger.error(
        "unhandled error in %s %s",
        request.method,
        request.url.path,
        exc_info=exc,
        extra={"code": "internal", "transport": TRANSPORT},
    )
    return error_response(500, "internal", "internal error; the server log has the details")


class GuardedRoute(APIRoute):
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


def add_error_handlers(app: FastAPI) -> None:
    """Answer every error the app can meet; make the app's own routes guarded too."""
    app.router.route_class = GuardedRoute
    app.add_exception_handler(SandboxError, _on_sandbox_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(HTTPException, _on_http_error)
    app.add_exception_handler(Exception, _on_unexpected)
