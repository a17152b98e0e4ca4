"""The web view's feeds at fleet scale: one page of the list (search, filters, problems first) with the capacity
panel's report, thumbnails, the tail of a terminal's output, and a sandbox's listening ports with their preview links.

What a poll of the list page costs is bounded by the page, not the fleet: the query is a pass over the store's
documents (``service.fleet``), and health probes, output tails and thumbnails are only for the sandboxes on the page
(the page asks thumbnails only for the cards on screen). Thumbnails are cached for ``THUMB_TTL_S``, so several open
pages cost one screenshot per sandbox per period.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response

from sandbox.api.web.capacity import capacity_view
from sandbox.errors import SandboxError
from sandbox.models import SandboxInfo
from sandbox.service import Principal, SandboxService
from sandbox.service.fleet import MAX_LIMIT, FleetQuery, fleet_page, task_id
from sandbox.service.preview import port_url
from sandbox.service.tickets import TicketGrant, TicketIssuer

VIEW = "/view"
THUMBNAIL_SIZE = (320, 200)
THUMB_TTL_S = 2.0
HEALTH_TTL_S = 10.0
HEALTH_TIMEOUT_S = 3.0
CARD_LINES = 8
"""Lines of recent output a terminal's card shows."""
PAGE_LINES = 200
NO_STORE = {"Cache-Control": "no-store"}


def mount_fleet(
    app: FastAPI,
    *,
    service: SandboxService,
    tickets: TicketIssuer,
    login: bool,
    session_holder: Callable[[Request], Principal],
    ticket_holder: Callable[[Request, str], TicketGrant],
) -> None:
    health = _HealthCache(service)
    thumbs: dict[str, tuple[float, bytes]] = {}

    @app.get(f"{VIEW}/api/sandboxes", include_in_schema=False)
    async def list_feed(
        request: Request,
        q: Annotated[str, Query(max_length=500)] = "",
        kind: str | None = None,
        state: str | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 24,
    ) -> dict[str, Any]:
        """One page of the sandboxes the session sees: ``q`` words all match (id, tenant, task id, labels;
        ``key=value`` a label), ``kind`` and ``state`` (or ``failing``) filter; failing first, then newest. With
        them, the session's capacity report (:mod:`~sandbox.api.web.capacity`)."""
        principal = session_holder(request)
        query = FleetQuery(q=q, kind=kind or None, state=state or None, offset=offset, limit=limit)
        found = await fleet_page(service.store, principal, query)
        infos = [r.info() for r in found.records]
        checks = await asyncio.gather(*(health.get(principal, i.id) for i in infos))
        return {
            "tenant": principal.tenant, "admin": principal.admin, "login": login, "now": time.time(),
            "total": found.total, "matched": found.matched, "offset": offset, "limit": limit, "counts": found.counts,
            "sandboxes": [
                {**_card(info), "labels": info.spec.labels, "task_id": task_id(record), "health": check,
                 "output": [] if info.kind.has_display else service.output.tail(info.id, CARD_LINES)}
                for info, record, check in zip(infos, found.records, checks, strict=True)
            ],
            "capacity": capacity_view(service, principal),
        }  # fmt: skip

    @app.get(
        f"{VIEW}/api/sandboxes/{{sandbox_id}}/thumbnail",
        response_class=Response,
        responses={200: {"content": {"image/jpeg": {}}}},
        include_in_schema=False,
    )
    async def thumbnail(sandbox_id: str, request: Request) -> Response:
        principal = session_holder(request)
        now = time.monotonic()
        cached = thumbs.get(sandbox_id)
        if cached is not None and now - cached[0] < THUMB_TTL_S:
            await service.get(principal, sandbox_id)  # tenancy, as for a fresh one
            return Response(cached[1], media_type="image/jpeg", headers=NO_STORE)
        shot = await service.screenshot(principal, sandbox_id, format="jpeg", quality=70)
        data = await asyncio.to_thread(_downscale, shot.data, THUMBNAIL_SIZE)
        for old in [k for k, (at, _) in thumbs.items() if now - at >= THUMB_TTL_S]:
            del thumbs[old]
        thumbs[sandbox_id] = (now, data)
        return Response(data, media_type="image/jpeg", headers=NO_STORE)

    @app.get(f"{VIEW}/api/sandboxes/{{sandbox_id}}/output", include_in_schema=False)
    async def list_output(
        sandbox_id: str, request: Request, lines: Annotated[int, Query(ge=1, le=PAGE_LINES)] = PAGE_LINES
    ) -> dict[str, Any]:
        """The tail of what its commands printed (``service.output_tail``), oldest line first."""
        return {"lines": await service.output_tail(session_holder(request), sandbox_id, lines=lines)}

    @app.get(f"{VIEW}/{{sandbox_id}}/output", include_in_schema=False)
    async def page_output(sandbox_id: str, request: Request) -> dict[str, Any]:
        grant = ticket_holder(request, sandbox_id)
        return {"lines": await service.output_tail(grant.principal, sandbox_id, lines=PAGE_LINES)}

    @app.get(f"{VIEW}/{{sandbox_id}}/ports", include_in_schema=False)
    async def page_ports(sandbox_id: str, request: Request) -> dict[str, Any]:
        """Its listening ports; with a control ticket, a preview URL for each previewable one (a preview drives the
        app, which a view-only ticket must not). Looking is no activity: it keeps no sandbox alive."""
        grant = ticket_holder(request, sandbox_id)
        ports = await service.ports(grant.principal, sandbox_id, touch=False)
        out = []
        for entry in ports:
            url = None
            if grant.control and entry.get("previewable"):
                url = (await port_url(service, tickets, grant.principal, sandbox_id, int(entry["port"]))).url
            out.append({**entry, "url": url})
        return {"ports": out, "links": grant.control}


def _card(info: SandboxInfo) -> dict[str, Any]:
    return {
        **info.model_dump(mode="json", exclude={"spec"}),
        "screen": info.spec.screen.model_dump(),
        "has_display": info.kind.has_display,
    }


class _HealthCache:
    """Each sandbox's health for the list page, probed at most every ``HEALTH_TTL_S``, and only the page's."""

    def __init__(self, service: SandboxService) -> None:
        self._service = service
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}

    async def get(self, principal: Principal, sandbox_id: str) -> dict[str, Any]:
        now = time.monotonic()
        cached = self._cache.get(sandbox_id)
        if cached is not None and now - cached[0] < HEALTH_TTL_S:
            return cached[1]
        try:
            health = await asyncio.wait_for(self._service.health(principal, sandbox_id), HEALTH_TIMEOUT_S)
            result: dict[str, Any] = {"ok": health.ok, "failures": health.failures}
        except TimeoutError:
            result = {"ok": False, "failures": {"probe": f"no answer within {HEALTH_TIMEOUT_S:g} s"}}
        except SandboxError as e:
            result = {"ok": False, "failures": {"probe": e.message}}
        self._cache = {k: v for k, v in self._cache.items() if now - v[0] < HEALTH_TTL_S}
        self._cache[sandbox_id] = (now, result)
        return result


def _downscale(image: bytes, size: tuple[int, int]) -> bytes:
    """A JPEG no larger than ``size``; blocking, so run it in a thread. Without Pillow, the image as it is."""
    try:
        from PIL import Image
    except ImportError:
        return image

    with Image.open(io.BytesIO(image)) as picture:
        small = picture.convert("RGB")
        small.thumbnail(size)
        out = io.BytesIO()
        small.save(out, format="JPEG", quality=75)
    return out.getvalue()
