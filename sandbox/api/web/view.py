"""The developer web view: a live list of the tenant's sandboxes, and a VNC view of one sandbox.

Pages are static files in ``static/`` (no build step); noVNC comes from Debian's ``novnc``
package and is served under ``/view/novnc/`` (nothing from a CDN). The routes only translate and
call the service layer, like the REST skin they join.

Access:

- **Tickets** open one sandbox. A bearer-token holder asks ``POST /v1/sandboxes/{id}/tickets``
  (``{"control": false}``) and opens the returned ``url`` (``/view/{id}?ticket=…``). The ticket
  authorizes that page, its JSON feed, its log tail and its VNC websocket, for that sandbox only,
  until it expires (60 s by default); the open page renews it before then (``/view/{id}/renew``:
  same sandbox, same rights, and only while the holder still sees the sandbox). A view ticket
  makes a view-only VNC session: the proxy drops input on the server. A ``control`` ticket lets the
  page's "take control" switch drive the sandbox.
- **The list page** (``/view``) takes a token once, ``/view?token=…`` or the form it shows; the
  server answers with an HttpOnly, SameSite=Strict cookie holding a signed session (never the
  token itself) and redirects to ``/view``. From there ``/view/{id}`` (and ``?control=1``) mints a
  ticket with that session and redirects to the ticket URL. With no tokens configured (loopback
  only) everyone is the admin and no login is asked.

The list's feeds (a page of a fleet: search, filters, paging; thumbnails; a terminal's output tail) and a
sandbox's port list are in :mod:`~sandbox.api.web.fleet`; docs/webview.md says what the pages do.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Request, Response, WebSocket
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import Field, StrictBool

from sandbox import environment
from sandbox.api.contract import SandboxId, error_responses
from sandbox.api.web import vnc_proxy
from sandbox.api.web.fleet import mount_fleet
from sandbox.api.web.screens import live_view, mount_screens
from sandbox.errors import FailedPrecondition, SandboxError, Unauthenticated
from sandbox.models import Model
from sandbox.service import Principal, SandboxService, TokenRegistry
from sandbox.service.tickets import TicketGrant, TicketIssuer
from sandbox.wire.status import http_status

VIEW = "/view"
VNC_PORT = 5900
"""x11vnc inside desktop and browser sandboxes, on the sandbox's loopback; the agent tunnels to it."""
SESSION_COOKIE = "sandbox_view_session"
TICKET_HEADER = "X-Sandbox-Ticket"
STATIC_DIR = Path(__file__).with_name("static")
DEFAULT_NOVNC_DIR = "/usr/share/novnc"
LOG_TAIL = 200
TRAJECTORY_LIST = 50


class TicketRequest(Model):
    control: StrictBool = Field(False, description="Whether the ticket may drive the sandbox (keys, pointer).")


class ViewTicket(Model):
    ticket: str
    url: str = Field(description="The sandbox's view page, relative to the control plane.")
    expires_at: float


def mount_webview(
    app: FastAPI,
    *,
    service: SandboxService,
    tokens: TokenRegistry,
    tickets: TicketIssuer,
    logger: logging.Logger,
    novnc_dir: str | None = None,
) -> None:
    """Add the web view's pages, JSON feeds, websocket and static files to ``app``."""
    novnc = Path(novnc_dir or environment.novnc_dir() or DEFAULT_NOVNC_DIR)
    if not (novnc / "core" / "rfb.js").is_file():
        logger.warning("noVNC not found in %s (install Debian's novnc package): the VNC view will not load", novnc)
    pages = {p.name: p.read_text() for p in STATIC_DIR.glob("*.html")}

    def page(name: str, status: int, **values: str) -> Response:
        """A page of ``static/``; its ``{{key}}`` placeholders take the HTML-escaped values."""
        text = pages[name]
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", html.escape(value))
        return HTMLResponse(text, status_code=status, headers={"Cache-Control": "no-store"})

    bearer = HTTPBearer(auto_error=False, description="A token from the server's token file.")

    # ------------------------------------------------------------------ who is asking

    # Dependencies local to this mount go in defaults: string annotations cannot name closure locals.
    bearer_credentials = Depends(bearer)

    async def token_holder(
        request: Request, credentials: HTTPAuthorizationCredentials | None = bearer_credentials
    ) -> Principal:
        if credentials is None and request.headers.get("authorization"):
            raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
        return tokens.authenticate(credentials.credentials if credentials else None)

    bearer_caller = Depends(token_holder)

    def session_holder(request: Request) -> Principal:
        if not tokens.enabled:
            return tokens.authenticate(None)
        return tickets.verify_session(request.cookies.get(SESSION_COOKIE))

    def ticket_holder(request: Request, sandbox_id: str) -> TicketGrant:
        ticket = request.headers.get(TICKET_HEADER) or request.query_params.get("ticket")
        return tickets.verify(ticket, sandbox_id)

    async def issue(principal: Principal, sandbox_id: str, control: bool) -> ViewTicket:
        await service.get(principal, sandbox_id)  # tenancy: only a sandbox the holder can see
        ticket = tickets.issue(principal, sandbox_id, control=control)
        expires_at = tickets.verify(ticket, sandbox_id).expires_at
        return ViewTicket(ticket=ticket, url=f"{VIEW}/{sandbox_id}?ticket={ticket}", expires_at=expires_at)

    # ------------------------------------------------------------------ the ticket office (REST)

    @app.post(
        "/v1/sandboxes/{sandbox_id}/tickets",
        status_code=201,
        responses=error_responses(400, 401, 404, 409, 413, 422, "5XX"),
        tags=["web view"],
    )
    async def create_ticket(
        sandbox_id: SandboxId, body: TicketRequest | None = None, caller: Principal = bearer_caller
    ) -> ViewTicket:
        """A short-lived ticket that opens this sandbox's web view (``url``), and no other sandbox."""
        return await issue(caller, sandbox_id, (body or TicketRequest()).control)

    # ------------------------------------------------------------------ the list page

    @app.get(VIEW, response_class=HTMLResponse, include_in_schema=False)
    async def list_page(request: Request, token: str | None = None) -> Response:
        if token is not None:
            try:
                principal = tokens.authenticate(token)
            except SandboxError as e:
                return page("login.html", 401, message=e.message)
            response = RedirectResponse(VIEW, status_code=303)
            response.set_cookie(
                SESSION_COOKIE,
                tickets.issue_session(principal),
                max_age=int(tickets.session_ttl_s),
                path=VIEW,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return response
        try:
            session_holder(request)
        except SandboxError:
            return page("login.html", 401, message="")
        return page("list.html", 200)

    @app.get(f"{VIEW}/logout", include_in_schema=False)
    async def logout() -> Response:
        response = RedirectResponse(VIEW, status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=VIEW)
        return response

    mount_screens(app, service=service, ticket_holder=ticket_holder)
    mount_fleet(
        app,
        service=service,
        tickets=tickets,
        login=tokens.enabled,
        session_holder=session_holder,
        ticket_holder=ticket_holder,
    )
    _mount_trajectories(app, service, session_holder, page)

    # ------------------------------------------------------------------ one sandbox

    @app.get(f"{VIEW}/{{sandbox_id}}", response_class=HTMLResponse, include_in_schema=False)
    async def sandbox_page(
        sandbox_id: str, request: Request, ticket: str | None = None, control: bool = False
    ) -> Response:
        try:
            if ticket is None:  # from the list page: trade the session for a ticket
                out = await issue(session_holder(request), sandbox_id, control)
                return RedirectResponse(out.url, status_code=303)
            grant = tickets.verify(ticket, sandbox_id)
            await service.get(grant.principal, sandbox_id)
        except SandboxError as e:
            if ticket is None and isinstance(e, Unauthenticated):
                e = Unauthenticated("this page needs a ticket: POST /v1/sandboxes/{id}/tickets, then open its url")
            return page("error.html", http_status(e), message=e.message, sandbox_id=sandbox_id)
        return page("sandbox.html", 200)

    @app.get(f"{VIEW}/{{sandbox_id}}/actions", include_in_schema=False)
    async def sandbox_feed(sandbox_id: str, request: Request) -> dict[str, Any]:
        """The page's poll: the sandbox, what the ticket allows, and its recent actions (newest last)."""
        grant = ticket_holder(request, sandbox_id)
        info = await service.get(grant.principal, sandbox_id)
        actions = await service.recent_actions(grant.principal, sandbox_id)
        return {
            "now": time.time(),
            "sandbox": {**info.model_dump(mode="json", exclude={"spec"}), "screen": info.spec.screen.model_dump(),
                        "has_display": info.kind.has_display, "live": live_view(info.kind)},
            "grant": {"control": grant.control, "expires_at": grant.expires_at},
            "actions": actions,
        }  # fmt: skip

    @app.get(f"{VIEW}/{{sandbox_id}}/logs", response_class=Response, include_in_schema=False)
    async def sandbox_logs(sandbox_id: str, request: Request) -> Response:
        grant = ticket_holder(request, sandbox_id)
        text = await service.logs(grant.principal, sandbox_id, tail=LOG_TAIL)
        return Response(text, media_type="text/plain; charset=utf-8", headers={"Cache-Control": "no-store"})

    @app.post(f"{VIEW}/{{sandbox_id}}/renew", include_in_schema=False)
    async def renew(sandbox_id: str, request: Request) -> ViewTicket:
        """A fresh ticket for an open page: the same sandbox and rights, while the holder still sees it."""
        grant = ticket_holder(request, sandbox_id)
        return await issue(grant.principal, sandbox_id, grant.control)

    @app.websocket(f"{VIEW}/{{sandbox_id}}/vnc")
    async def vnc(websocket: WebSocket, sandbox_id: str) -> None:
        try:
            grant = tickets.verify(websocket.query_params.get("ticket"), sandbox_id)
            info = await service.get(grant.principal, sandbox_id)
        except SandboxError as e:
            logger.info("refused a VNC websocket to %s: %s", sandbox_id, e.message)
            await websocket.close(vnc_proxy.WS_POLICY_VIOLATION, e.message[:120])
            return
        try:
            if live_view(info.kind) != "vnc":
                raise FailedPrecondition(f"sandbox {sandbox_id} is a {info.kind.value} sandbox, with no VNC server")
            reader, writer = await service.open_tunnel(grant.principal, sandbox_id, VNC_PORT)
        except SandboxError as e:
            logger.warning("no VNC tunnel to %s: %s", sandbox_id, e.message)
            await websocket.close(vnc_proxy.WS_INTERNAL_ERROR, e.message[:120])
            return
        offered = websocket.scope.get("subprotocols") or []
        await websocket.accept(subprotocol="binary" if "binary" in offered else None)
        logger.info("VNC session to %s opened (%s)", sandbox_id, "control" if grant.control else "view only")
        await vnc_proxy.pump(
            websocket, reader, writer, view_only=not grant.control, logger=logger, label=f"sandbox {sandbox_id}"
        )

    # ------------------------------------------------------------------ static files

    app.mount(f"{VIEW}/static", StaticFiles(directory=STATIC_DIR), name="webview-static")
    for part in ("core", "vendor"):  # the RFB client and what it imports; not Debian's demo app
        app.mount(f"{VIEW}/novnc/{part}", StaticFiles(directory=novnc / part, check_dir=False), name=f"novnc-{part}")


def _mount_trajectories(
    app: FastAPI, service: SandboxService, session_holder: Callable[[Request], Principal], page: Callable[..., Response]
) -> None:
    """The replay page of a recorded episode (``/view/trajectories/{id}``: frames, actions, reward) and its feeds,
    for the session's tenant (every tenant's for an admin), like the list page."""

    @app.get(f"{VIEW}/api/trajectories", include_in_schema=False)
    async def trajectories_feed(request: Request) -> dict[str, Any]:
        """The newest ``TRAJECTORY_LIST`` trajectories, newest first."""
        found = await service.list_trajectories(session_holder(request))
        newest = sorted(found, key=lambda t: t.started_at, reverse=True)[:TRAJECTORY_LIST]
        return {"trajectories": [t.model_dump(mode="json") for t in newest], "total": len(found)}

    @app.get(f"{VIEW}/api/trajectories/{{trajectory_id}}", include_in_schema=False)
    async def trajectory_feed(trajectory_id: str, request: Request) -> dict[str, Any]:
        found = await service.get_trajectory(session_holder(request), trajectory_id)
        return found.model_dump(mode="json")

    @app.get(f"{VIEW}/api/trajectories/{{trajectory_id}}/frames/{{sha256}}", include_in_schema=False)
    async def trajectory_frame(trajectory_id: str, sha256: str, request: Request) -> Response:
        shot = await service.trajectory_frame(session_holder(request), trajectory_id, sha256)
        cache = {"Cache-Control": "private, max-age=3600"}  # named by its content
        return Response(shot.data, media_type=f"image/{shot.format}", headers=cache)

    @app.get(f"{VIEW}/trajectories/{{trajectory_id}}", response_class=HTMLResponse, include_in_schema=False)
    async def trajectory_page(trajectory_id: str, request: Request) -> Response:
        try:
            principal = session_holder(request)
        except SandboxError:
            return page("login.html", 401, message="")
        try:
            await service.get_trajectory(principal, trajectory_id)
        except SandboxError as e:
            return page("error.html", http_status(e), message=e.message, sandbox_id=trajectory_id)
        return page("trajectory.html", 200)
