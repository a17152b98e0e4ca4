"""``ScreenDamage``: which rows of the screen were drawn on since the last look, from the X DAMAGE extension.

A screenshot then copies only those rows out of the X server and compares only their bands with the last frame;
when nothing was drawn it copies nothing. Between two agent steps most of a screen stays as it was, and copying the
whole 4 MB frame (then comparing it) was most of a screenshot's cost.

The damage is taken atomically: ``DamageSubtract`` moves what was drawn so far into an XFixes region and empties the
damage in one request; ``RegionExtents`` reduces the region to its bounding box, which ``FetchRegion`` reads back.
Whatever is drawn after the subtract is in the next take's region, so a row left out of a capture has not been drawn
on since a capture that copied it. Events are not used: the damage object reports at the lowest level (one event
when it stops being empty), and the X thread drops those events with the rest.

python-xlib implements neither XFixes regions nor a damage object's region use: the request layouts below are from
the XFixes protocol spec (version 2 and later).
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from Xlib import X
from Xlib import error as xerror
from Xlib.ext import damage as xdamage
from Xlib.protocol import rq, structs

_XFIXES_CREATE_REGION = 5
_XFIXES_DESTROY_REGION = 10
_XFIXES_REGION_EXTENTS = 18
_XFIXES_FETCH_REGION = 19


class _CreateRegion(rq.Request):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(_XFIXES_CREATE_REGION),
        rq.RequestLength(),
        rq.Card32("region"),
        rq.List("rectangles", structs.Rectangle),
    )


class _DestroyRegion(rq.Request):
    _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(_XFIXES_DESTROY_REGION), rq.RequestLength(), rq.Card32("region"))


class _RegionExtents(rq.Request):
    _request = rq.Struct(
        rq.Card8("opcode"),
        rq.Opcode(_XFIXES_REGION_EXTENTS),
        rq.RequestLength(),
        rq.Card32("source"),
        rq.Card32("destination"),
    )


class _FetchRegion(rq.ReplyRequest):
    _request = rq.Struct(rq.Card8("opcode"), rq.Opcode(_XFIXES_FETCH_REGION), rq.RequestLength(), rq.Card32("region"))
    _reply = rq.Struct(
        rq.ReplyCode(),
        rq.Pad(1),
        rq.Card16("sequence_number"),
        rq.ReplyLength(),
        rq.Object("extents", structs.Rectangle),
        rq.Pad(16),
        # then the region's rectangles: one, its extents, as ``take`` fetches it
    )


class ScreenDamage:
    """The root window's damage. Used only on the X thread, like the connection it was made on."""

    def __init__(self, d: Any, xfixes: int, damage: int, region: int, height: int) -> None:
        self._d = d
        self._xfixes = xfixes
        self._damage = damage
        self._region = region
        self._height = height
        self._known = False  # nothing captured through this tracker yet: all of the screen counts as drawn

    @classmethod
    def track(cls, d: Any, root: Any, height: int) -> ScreenDamage | None:
        """None when the server lacks DAMAGE or XFixes 2 (screenshots then copy the whole screen each time)."""
        if not (d.has_extension(xdamage.extname) and d.has_extension("XFIXES")):
            return None
        catcher = xerror.CatchError()
        try:
            d.damage_query_version()  # the server refuses a client's damage requests until it has asked
            if d.xfixes_query_version().major_version < 2:
                return None
            damage = root.damage_create(xdamage.DamageReportNonEmpty)
            xfixes = d.display.get_extension_major("XFIXES")
            region = d.display.allocate_resource_id()
            _CreateRegion(display=d.display, onerror=catcher, opcode=xfixes, region=region, rectangles=[])
            d.sync()
        except xerror.XError:
            return None
        if catcher.get_error() is not None:
            with suppress(Exception):
                d.damage_destroy(damage)  # the connection lives on: it would hold the damage for nothing
            return None
        return cls(d, xfixes, damage, region, height)

    def take(self) -> tuple[int, int]:
        """The rows ``[top, bottom)`` drawn on since the last take (all of them the first time; ``top == bottom``
        when none). The damage starts again empty."""
        self._d.damage_subtract(self._damage, X.NONE, self._region)
        # Its bounding box only: a screen drawn on all over for a while makes a region of thousands of rectangles.
        _RegionExtents(display=self._d.display, opcode=self._xfixes, source=self._region, destination=self._region)
        extents = _FetchRegion(display=self._d.display, opcode=self._xfixes, region=self._region).extents
        while self._d.pending_events():  # the damage object's notices (and anything else nobody listens for)
            self._d.next_event()
        if not self._known:
            self._known = True
            return 0, self._height
        top = max(0, extents.y)
        bottom = min(self._height, extents.y + extents.height)
        return (top, bottom) if extents.width and bottom > top else (0, 0)

    def close(self) -> None:
        with suppress(Exception):
            self._d.damage_destroy(self._damage)
            _DestroyRegion(display=self._d.display, opcode=self._xfixes, region=self._region)
