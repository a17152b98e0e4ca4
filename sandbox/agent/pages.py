"""Several pages in one browser sandbox (game sessions), each with its own clock, input and screenshot.

``page_open`` opens a page in a window of its own, not a tab: Chromium renders every window's page (the image's
flags turn off the occlusion and background throttling), while a background tab stops drawing and takes seconds, or
forever, to give a screenshot. Its id is the CDP target id; ``page`` on the browser ops (navigate, evaluate,
info, screenshot) and on the ops here names it, and the active page (the most recently focused) is the default.
Input (``page_key``, ``page_click``) goes through CDP ``Input.dispatch*Event`` to that page's renderer, so
several pages are played at once and none needs the X keyboard focus.

The clock (``clock.js``) is installed with ``Page.addScriptToEvaluateOnNewDocument``: it runs in every document
of the page before the page's own scripts and replaces ``Date``, ``performance.now``, the timers and
``requestAnimationFrame`` with a virtual time. ``page_clock`` pauses it, resumes it, sets its speed (k times real
time) or steps it by N ms: a step runs every callback due up to the target time, in order, and returns after they
ran, so the same actions and steps give the same page, whatever the wall time between them.

Why not CDP virtual time (``Emulation.setVirtualTimePolicy``): measured on this image's Chromium 156 in a window,
a 1000 ms budget moved ``performance.now()`` by 1000.1 ms, then 999.9 ms (not exact), ran no animation frame at
all (frames need BeginFrame control, headless only), hung ``Page.captureScreenshot`` while paused, blocked a
navigation started while paused, and has no "k times real time" mode. The script gives exact steps, frames on a
fixed grid, screenshots at any time and a speed factor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sandbox.agent.browser import Browser, page_arg
from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.agent.page_input import click_events, key_events
from sandbox.protocol import ErrorCode

CLOCK_SCRIPT = Path(__file__).with_name("clock.js")
CLOCK_MODES = ("running", "paused", "none")
"""How ``page_open`` starts a page's clock; ``none``: no platform clock, the page sees real time."""
CLOCK_OPS = ("pause", "resume", "step", "speed", "state")
MAX_STEP_MS = 86_400_000
MAX_FACTOR = 1000.0
FRAME_MS = 1000 / 60
CLOSE_WAIT_S = 5.0
"""How long a closed page may stay listed before the close returns anyway (it is gone in milliseconds)."""
_CONFIG = re.compile(r"/\*CONFIG\*/.*?/\*END\*/", re.DOTALL)


@dataclass
class _Installed:
    """A clock registered on a page: the registration lives as long as the session that made it."""

    session: Any
    identifier: str
    mode: str
    factor: float


class Pages:
    def __init__(self, browser: Browser, *, logger: logging.Logger) -> None:
        self._browser = browser
        self._log = logger
        self._clocks: dict[str, _Installed] = {}
        self._source: str | None = None

    async def open(self, args: dict[str, Any]) -> dict[str, Any]:
        require(args, "url", str)
        clock = cast(str, require(args, "clock", str, "running"))
        if clock not in CLOCK_MODES:
            raise bad_request(f"argument 'clock' must be one of {', '.join(CLOCK_MODES)}, got {clock!r}")
        factor = _factor(require(args, "factor", (int, float), 1.0))
        browser = await self._browser.browser_session()
        created = await browser.call("Target.createTarget", {"url": "about:blank", "newWindow": True})
        target_id = str(created["targetId"])
        try:
            page = await self._browser.session(target_id)
            await page.call("Emulation.setFocusEmulationEnabled", {"enabled": True})
            if clock != "none":
                await self._install(target_id, page, clock, factor)
            state = await self._browser.navigate({**args, "page": target_id})
            if "error" in state:
                raise bad_request(f"cannot open {args['url']!r}: {state['error']}")
            clock_state = await self._clock_call(page, "state()") if clock != "none" else None
        except BaseException:
            self._clocks.pop(target_id, None)
            with contextlib.suppress(Exception):
                await self._close_target(browser, target_id)
            raise
        self._log.info("opened page %s (%s, clock %s)", target_id, state.get("url"), clock)
        return {"page": target_id, **state, "clock": clock_state}

    async def close(self, args: dict[str, Any]) -> dict[str, Any]:
        page_id = cast(str, require(args, "page", str))
        ids = [str(p["id"]) for p in await self._browser.page_targets()]
        if page_id not in ids:
            raise AgentError(ErrorCode.NOT_FOUND, f"no page {page_id!r} is open (page_list lists them)")
        if len(ids) == 1:
            raise bad_request("cannot close the last page: Chromium would exit with it; navigate it elsewhere instead")
        browser = await self._browser.browser_session()
        await self._close_target(browser, page_id)
        self._clocks.pop(page_id, None)
        return {"closed": page_id, "pages": await self._list()}

    async def list_pages(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"pages": await self._list()}

    async def clock(self, args: dict[str, Any]) -> dict[str, Any]:
        op = cast(str, require(args, "op", str))
        if op not in CLOCK_OPS:
            raise bad_request(f"argument 'op' must be one of {', '.join(CLOCK_OPS)}, got {op!r}")
        call = f"{op}()"
        if op == "step":
            ms = float(require(args, "ms", (int, float)))
            if not 0 <= ms <= MAX_STEP_MS:
                raise bad_request(f"argument 'ms' must be in [0, {MAX_STEP_MS}], got {ms:g}")
            call = f"step({ms!r})"
        elif op == "speed":
            call = f"speed({_factor(require(args, 'factor', (int, float)))!r})"
        page = await self._page(page_arg(args))
        state = await self._clock_call(page, call)
        installed = self._clocks.get(page.target_id)
        if op in ("pause", "resume", "speed") and installed is not None:
            # A reload or a navigation of the page starts its new document in the mode and speed set last.
            await self._install(page.target_id, page, state["mode"], float(state["factor"]))
        return {"page": page.target_id, "clock": state}

    async def key(self, args: dict[str, Any]) -> dict[str, Any]:
        events = key_events(cast(str, require(args, "key", str)))
        page = await self._page(page_arg(args))
        for event in events:
            await page.call("Input.dispatchKeyEvent", event)
        return {"page": page.target_id}

    async def click(self, args: dict[str, Any]) -> dict[str, Any]:
        x, y = (float(require(args, name, (int, float))) for name in ("x", "y"))
        button = cast(str, require(args, "button", str, "left"))
        events = click_events(x, y, button=button, count=cast(int, require(args, "count", int, 1)))
        page = await self._page(page_arg(args))
        for event in events:
            await page.call("Input.dispatchMouseEvent", event)
        return {"page": page.target_id}

    # ------------------------------------------------------------------ helpers

    async def _close_target(self, browser: Any, target_id: str) -> None:
        """Close a page and return once Chromium no longer lists it: ``Target.closeTarget`` answers before the
        page is gone, and a page list taken right after would still show it."""
        await browser.call("Target.closeTarget", {"targetId": target_id})
        give_up = time.monotonic() + CLOSE_WAIT_S
        while time.monotonic() < give_up:
            if target_id not in {str(p["id"]) for p in await self._browser.page_targets()}:
                return
            await asyncio.sleep(0.02)
        self._log.warning("page %s is still listed %g s after it was closed", target_id, CLOSE_WAIT_S)

    async def _page(self, page_id: str | None) -> Any:
        page = await self._browser.session(page_id)
        installed = self._clocks.get(page.target_id)
        if installed is not None and installed.session is not page:
            await self._install(page.target_id, page, installed.mode, installed.factor)  # the session was new
        return page

    async def _list(self) -> list[dict[str, Any]]:
        pages = await self._browser.page_targets()
        open_ids = {str(p["id"]) for p in pages}
        for gone in [t for t in self._clocks if t not in open_ids]:  # closed by the page or a key, not page_close
            del self._clocks[gone]
        clocks = self._clocks
        return [
            {"page": str(p["id"]), "url": p.get("url", ""), "title": p.get("title", ""), "clock": p["id"] in clocks}
            for p in pages
        ]

    async def _install(self, target_id: str, page: Any, mode: str, factor: float) -> None:
        """Register the clock for the page's next documents, replacing the registration it had."""
        old = self._clocks.pop(target_id, None)
        if old is not None and old.session is page:
            with contextlib.suppress(AgentError):
                await page.call("Page.removeScriptToEvaluateOnNewDocument", {"identifier": old.identifier})
        config = json.dumps({"mode": mode, "factor": factor, "frame_ms": FRAME_MS})
        source = _CONFIG.sub(lambda _: config, self._script())
        added = await page.call("Page.addScriptToEvaluateOnNewDocument", {"source": source})
        self._clocks[target_id] = _Installed(page, str(added["identifier"]), mode, factor)

    def _script(self) -> str:
        if self._source is None:
            try:
                self._source = CLOCK_SCRIPT.read_text()
            except OSError as e:
                raise AgentError(ErrorCode.INTERNAL, f"the page clock script is missing: {e}") from e
        return self._source

    async def _clock_call(self, page: Any, call: str) -> dict[str, Any]:
        state = await self._browser.run_js(page, f"window.__clock ? window.__clock.{call} : null")
        if not isinstance(state, dict):
            raise bad_request(
                f"page {page.target_id} has no platform clock: open it with page_open (clock 'running' or 'paused')"
            )
        return state


def _factor(value: Any) -> float:
    factor = float(value)
    if not 0 < factor <= MAX_FACTOR:
        raise bad_request(f"a clock speed factor must be in (0, {MAX_FACTOR:g}], got {factor:g}")
    return factor
