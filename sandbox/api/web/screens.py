"""The web view of a sandbox with a screen but no VNC server (android: the emulator draws no X display): its live
screen as screenshots the page polls, and, with a control ticket, input sent as steps (tap, swipe, key, type_text),
so an android sandbox is watched and taken over like the others. A step sent here is an action like any other: in
an episode it is counted and kept in the trajectory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import FastAPI, Request, Response
from pydantic import Field, TypeAdapter, ValidationError

from sandbox.errors import InvalidArgument, PermissionDenied
from sandbox.models import Key, SandboxKind, TypeText
from sandbox.models.android import Swipe, Tap
from sandbox.service import SandboxService
from sandbox.service.tickets import TicketGrant

VIEW = "/view"
VNC_KINDS = frozenset({SandboxKind.DESKTOP, SandboxKind.BROWSER})
"""Kinds whose sandbox runs a VNC server (x11vnc on its X display); the others with a display are shown here."""
SCREEN_QUALITY = 80
NO_STORE = {"Cache-Control": "no-store"}

PageInput = Annotated[Tap | Swipe | Key | TypeText, Field(discriminator="type")]
_INPUT = TypeAdapter(PageInput)


def live_view(kind: SandboxKind) -> Literal["vnc", "screenshots", "none"]:
    """How the sandbox page shows ``kind`` live."""
    if kind in VNC_KINDS:
        return "vnc"
    return "screenshots" if kind.has_display else "none"


def mount_screens(
    app: FastAPI, *, service: SandboxService, ticket_holder: Callable[[Request, str], TicketGrant]
) -> None:
    @app.get(
        f"{VIEW}/{{sandbox_id}}/screen",
        response_class=Response,
        responses={200: {"content": {"image/jpeg": {}}}},
        include_in_schema=False,
    )
    async def screen(sandbox_id: str, request: Request) -> Response:
        """The screen now, as JPEG (any ticket for the sandbox). Looking is no activity: it keeps no sandbox alive
        longer than the VNC view would."""
        grant = ticket_holder(request, sandbox_id)
        shot = await service.screenshot(grant.principal, sandbox_id, format="jpeg", quality=SCREEN_QUALITY)
        return Response(shot.data, media_type="image/jpeg", headers=NO_STORE)

    @app.post(f"{VIEW}/{{sandbox_id}}/input", include_in_schema=False)
    async def page_input(sandbox_id: str, request: Request) -> dict[str, object]:
        """One input from the page (tap, swipe, key, type_text) as a step; a control ticket only."""
        grant = ticket_holder(request, sandbox_id)
        if not grant.control:
            raise PermissionDenied("this view is view-only: open it with a control ticket to send input")
        try:
            action = _INPUT.validate_json(await request.body())
        except ValidationError as e:
            raise InvalidArgument(f"input is one of tap, swipe, key, type_text: {e.errors()[0]['msg']}") from None
        obs = await service.step(grant.principal, sandbox_id, action)
        return {"ok": True, "done": obs.done}
