"""Preview URLs: HTTP and websockets to a port inside a sandbox, in two forms that differ only in the path the app
gets and in what the proxy rewrites:

- ``/v1/sandboxes/{id}/ports/{port}/...``: the prefix is stripped (the app sees ``/...``), and a ``Location`` or
  ``Set-Cookie`` path from the app's root is moved into the prefix;
- ``/v1/sandboxes/{id}/apps/{port}/...`` (full path): the app gets the whole path, prefix included, and its
  ``Location`` and ``Set-Cookie`` pass unchanged: for apps told their base path (Jupyter's ``base_url``).

Every request opens one tunnel through the sandbox's agent (the same guarded channel as VNC: no network is
needed in the sandbox, and the agent refuses the platform's own ports, see ``sandbox.agent.ports``), speaks
HTTP/1.1 over it with ``Connection: close`` and streams the answer back chunk by chunk (nothing is buffered
whole: downloads and server-sent events flow as the app writes them). A websocket is relayed message by message.

Access, checked on every request (the sandbox must still be the caller's: another tenant's is 404):

- ``Authorization: Bearer <token>`` (the token is not passed on to the app), or
- a port ticket from ``POST /v1/sandboxes/{id}/urls`` (``?ticket=`` in the URL ``sandbox.url(port)`` returns).
  The proxy trades it for an HttpOnly cookie scoped to the form's path prefix and redirects to the same URL
  without it, so the app never sees it; a ticket opens that one port of that one sandbox, in either form.

Nothing listening on the port is 502 with a message saying so. The app is told its base path in
``X-Forwarded-Prefix`` (both forms); an app that assumes it runs at ``/`` must be told its base path, and one told
it wants the full-path form (see docs/preview.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode

import h11
from fastapi import Depends, FastAPI, Request, Response, WebSocket
from fastapi.responses import RedirectResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from sandbox.api.contract import SandboxId, error_responses
from sandbox.api.preview.rewrite import PREVIEW_COOKIE, request_headers, response_headers
from sandbox.api.preview.websocket import relay_websocket
from sandbox.api.rest.errors import error_response
from sandbox.backends.agent_client import PortClosed
from sandbox.errors import SandboxError, Unauthenticated
from sandbox.models.preview import ListeningPort, PortUrl, UrlRequest
from sandbox.service import Principal, SandboxService, TokenRegistry
from sandbox.service.preview import port_path, port_url
from sandbox.service.tickets import TicketIssuer
from sandbox.wire.status import http_status

PORTS = "/v1/sandboxes/{sandbox_id}/ports/{port:int}"
APPS = "/v1/sandboxes/{sandbox_id}/apps/{port:int}"
CHUNK = 1 << 16
BAD_GATEWAY = 502


def prefix_of(sandbox_id: str, port: int, *, full_path: bool = False) -> str:
    """The preview's path prefix, without its trailing slash."""
    return port_path(sandbox_id, port, full_path=full_path).rstrip("/")


class PreviewProxy:
    def __init__(
        self, service: SandboxService, tokens: TokenRegistry, tickets: TicketIssuer, logger: logging.Logger
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.tickets = tickets
        self.log = logger

    def principal(self, headers: dict[str, str], cookies: dict[str, str], sandbox_id: str, port: int) -> Principal:
        """Who asks: the bearer token, else the preview cookie of this sandbox and port (no token file: the admin)."""
        authorization = headers.get("authorization")
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token:
                raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
            return self.tokens.authenticate(token.strip())
        cookie = cookies.get(PREVIEW_COOKIE)
        if cookie:
            return self.tickets.verify_port(cookie, sandbox_id, port, session=True).principal
        if not self.tokens.enabled:
            return self.tokens.authenticate(None)
        raise Unauthenticated("a preview needs a bearer token or a ticket (POST /v1/sandboxes/{id}/urls)")

    # ------------------------------------------------------------------ HTTP

    async def http(self, request: Request) -> Response:
        return await self.http_form(request, full_path=False)

    async def http_full_path(self, request: Request) -> Response:
        return await self.http_form(request, full_path=True)

    async def http_form(self, request: Request, *, full_path: bool) -> Response:
        """One HTTP request to the app; ``full_path``: the ``/apps/`` form (the whole path, no header rewriting)."""
        sandbox_id, port = str(request.path_params["sandbox_id"]), int(request.path_params["port"])
        prefix = prefix_of(sandbox_id, port, full_path=full_path)
        try:
            ticket = request.query_params.get("ticket")
            if ticket is not None:
                return await self._redeem(request, ticket, sandbox_id, port, prefix)
            principal = self.principal(dict(request.headers), request.cookies, sandbox_id, port)
            if request.url.path == prefix:  # relative links need the trailing slash
                return RedirectResponse(prefix + "/" + _query(request), status_code=308)
            reader, writer = await self.service.open_port(principal, sandbox_id, port)
        except PortClosed as e:
            return error_response(BAD_GATEWAY, "bad_gateway", f"port {port} of sandbox {sandbox_id}: {e.message}")
        except SandboxError as e:
            return error_response(http_status(e), e.code, e.message)
        try:
            return await self._exchange(request, reader, writer, prefix, full_path=full_path)
        except (h11.ProtocolError, ConnectionError, asyncio.IncompleteReadError) as e:
            writer.close()
            message = f"the app on port {port} of sandbox {sandbox_id} broke off or answered no HTTP: {e!r}"
            return error_response(BAD_GATEWAY, "bad_gateway", message)

    async def _redeem(self, request: Request, ticket: str, sandbox_id: str, port: int, prefix: str) -> Response:
        """A ticket in the URL: check it, set the preview cookie, and send the browser on without the ticket."""
        grant = self.tickets.verify_port(ticket, sandbox_id, port)
        await self.service.get(grant.principal, sandbox_id)
        rest = [(k, v) for k, v in parse_qsl(request.url.query, keep_blank_values=True) if k != "ticket"]
        path = request.url.path if request.url.path != prefix else prefix + "/"
        target = path + ("?" + urlencode(rest) if rest else "")
        response = RedirectResponse(target, status_code=303 if request.method in ("GET", "HEAD") else 307)
        response.set_cookie(
            PREVIEW_COOKIE,
            self.tickets.issue_port_session(grant.principal, sandbox_id, port),
            max_age=int(self.tickets.session_ttl_s),
            path=prefix + "/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def _exchange(
        self,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        prefix: str,
        *,
        full_path: bool,
    ) -> Response:
        host = request.headers.get("host", "")
        headers = request_headers(
            request.scope["headers"],
            prefix=prefix,
            host=host,
            scheme=request.url.scheme,
            client=request.client.host if request.client else None,
            strip_authorization=True,
        )
        chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
        has_body = chunked or "content-length" in request.headers
        headers = [(n, v) for n, v in headers if n not in (b"host", b"content-length")]
        if "content-length" in request.headers and not chunked:
            headers.append((b"content-length", request.headers["content-length"].encode()))
        elif chunked:
            headers.append((b"transfer-encoding", b"chunked"))
        headers = [(b"host", host.encode() or b"localhost"), *headers, (b"connection", b"close")]
        conn = h11.Connection(h11.CLIENT)
        target = _upstream_target(request, prefix, full_path=full_path)
        writer.write(conn.send(h11.Request(method=request.method, target=target, headers=headers)))
        if has_body:
            async for chunk in request.stream():
                if chunk:
                    writer.write(conn.send(h11.Data(data=chunk)))
                    await writer.drain()
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
        event = await _next(conn, reader)
        while isinstance(event, h11.InformationalResponse):
            event = await _next(conn, reader)
        if not isinstance(event, h11.Response):
            raise h11.RemoteProtocolError(f"expected a response, got {type(event).__name__}")
        out_headers = response_headers(event.headers.raw_items(), prefix=prefix, host=host, rewrite_paths=not full_path)
        response = StreamingResponse(_body(conn, reader, writer), status_code=event.status_code)
        response.raw_headers = out_headers
        return response

    # ------------------------------------------------------------------ websockets

    async def websocket(self, websocket: WebSocket) -> None:
        await self.websocket_form(websocket, full_path=False)

    async def websocket_full_path(self, websocket: WebSocket) -> None:
        await self.websocket_form(websocket, full_path=True)

    async def websocket_form(self, websocket: WebSocket, *, full_path: bool) -> None:
        sandbox_id, port = str(websocket.path_params["sandbox_id"]), int(websocket.path_params["port"])
        prefix = prefix_of(sandbox_id, port, full_path=full_path)
        try:
            ticket = websocket.query_params.get("ticket")
            if ticket is not None:
                principal = self.tickets.verify_port(ticket, sandbox_id, port).principal
            else:
                principal = self.principal(dict(websocket.headers), websocket.cookies, sandbox_id, port)
            reader, writer = await self.service.open_port(principal, sandbox_id, port)
        except SandboxError as e:
            self.log.info("refused a preview websocket to port %s of %s: %s", port, sandbox_id, e.message)
            await websocket.close(1011 if isinstance(e, PortClosed) else 1008, e.message[:120])
            return
        headers = request_headers(
            websocket.scope["headers"],
            prefix=prefix,
            host=websocket.headers.get("host", ""),
            scheme="https" if websocket.url.scheme == "wss" else "http",
            client=websocket.client.host if websocket.client else None,
            strip_authorization=True,
        )
        target = _upstream_target(websocket, prefix, full_path=full_path)
        await relay_websocket(websocket, reader, writer, target=target, headers=headers, logger=self.log)


def _query(request: Request) -> str:
    return "?" + request.url.query if request.url.query else ""


def _upstream_target(connection: Request | WebSocket, prefix: str, *, full_path: bool = False) -> str:
    """The request target for the app: the raw path after the prefix, or all of it with ``full_path`` (as the
    caller encoded it), and the query."""
    raw = connection.scope.get("raw_path") or connection.scope["path"].encode()
    raw_path = raw.decode("latin-1").split("?", 1)[0]
    if full_path:
        rest = raw_path if raw_path.startswith(prefix) else connection.scope["path"]
    else:
        rest = raw_path[len(prefix) :] if raw_path.startswith(prefix) else connection.scope["path"][len(prefix) :]
    query = connection.scope.get("query_string", b"").decode("latin-1")
    if "ticket" in connection.query_params:  # a websocket's ticket is the proxy's, never the app's
        query = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "ticket"])
    return (rest or "/") + ("?" + query if query else "")


async def _next(conn: h11.Connection, reader: asyncio.StreamReader) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await reader.read(CHUNK))


async def _body(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[bytes]:
    """The response body as the app writes it; the tunnel closes at its end (or when the caller goes)."""
    try:
        while True:
            event = await _next(conn, reader)
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def mount_preview(
    app: FastAPI,
    *,
    service: SandboxService,
    tokens: TokenRegistry,
    tickets: TicketIssuer,
    logger: logging.Logger,
    public_url: str | None = None,
) -> PreviewProxy:
    """Add the preview proxy's routes (HTTP, all methods, and websockets) to ``app``. Preview URLs start with
    ``public_url`` when it is set, else with the address the caller used."""
    proxy = PreviewProxy(service, tokens, tickets, logger)

    def bearer(request: Request) -> Principal:
        authorization = request.headers.get("authorization")
        scheme, _, token = (authorization or "").partition(" ")
        if authorization and (scheme.lower() != "bearer" or not token):
            raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
        return tokens.authenticate(token.strip() or None)

    caller = Depends(bearer)

    @app.post(
        "/v1/sandboxes/{sandbox_id}/urls",
        status_code=201,
        responses=error_responses(400, 401, 404, 409, 413, 422, "5XX"),
        tags=["previews"],
    )
    async def create_url(sandbox_id: SandboxId, body: UrlRequest, request: Request, who: Principal = caller) -> PortUrl:
        """A preview URL: HTTP and websockets to ``port`` inside the sandbox, through its agent, at
        ``/v1/sandboxes/{id}/ports/{port}/`` (the prefix stripped; the app gets ``X-Forwarded-Prefix``) or, with
        ``full_path``, at ``/v1/sandboxes/{id}/apps/{port}/`` (the app gets the whole path: its base path is
        ``path``). The URL carries a short-lived ticket for that port only; the bearer token works on the path too."""
        base = public_url or str(request.base_url)
        return await port_url(
            service, tickets, who, sandbox_id, body.port, ttl_s=body.ttl_s, base_url=base, full_path=body.full_path
        )

    @app.get(
        "/v1/sandboxes/{sandbox_id}/ports",
        responses=error_responses(400, 401, 404, 409, "5XX"),
        tags=["previews"],
    )
    async def list_ports(sandbox_id: SandboxId, who: Principal = caller) -> list[ListeningPort]:
        """The sandbox's listening TCP ports, and whether a preview URL reaches each."""
        return [ListeningPort.model_validate(p) for p in await service.ports(who, sandbox_id)]

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    for path in (PORTS, PORTS + "/{rest:path}"):
        app.router.routes.append(Route(path, proxy.http, methods=methods, include_in_schema=False))
        app.router.routes.append(WebSocketRoute(path, proxy.websocket))
    for path in (APPS, APPS + "/{rest:path}"):
        app.router.routes.append(Route(path, proxy.http_full_path, methods=methods, include_in_schema=False))
        app.router.routes.append(WebSocketRoute(path, proxy.websocket_full_path))
    return proxy
