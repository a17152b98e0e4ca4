"""Drive the sandbox's Chromium through the DevTools protocol (CDP) on 127.0.0.1.

Websockets stay open to the browser target, which owns the download settings (Chromium resets them when that
session goes away), and to each page the agent acted in. Every op takes an optional ``page`` (a target id, see
``pages.py``); without it, the active page (the most recently focused tab). ``websockets`` and PIL are imported
lazily so this module imports without them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import itertools
import json
import logging
from collections.abc import Iterator
from typing import Any, cast
from urllib.parse import urlsplit

from sandbox.agent.errors import AgentError, bad_request, require
from sandbox.protocol import ErrorCode

ALLOWED_SCHEMES = ("http", "https", "file", "about", "data")
HTTP_TIMEOUT = 5.0
COMMAND_TIMEOUT = 30.0
MAX_NAVIGATION_TIMEOUT = 600.0
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_WAIT_EVENTS = {"load": "Page.loadEventFired", "domcontentloaded": "Page.domContentEventFired"}
_STATUS_JS = "performance.getEntriesByType('navigation')[0]?.responseStatus ?? 0"

Event = tuple[str, dict[str, Any]]


class CdpError(AgentError):
    """Chromium answered a command with an error."""

    def __init__(self, method: str, message: str) -> None:
        super().__init__(ErrorCode.INTERNAL, f"{method}: {message}")
        self.cdp_message = message


class Browser:
    def __init__(self, *, cdp_port: int, downloads_dir: str, logger: logging.Logger) -> None:
        self._port = cdp_port
        self._downloads_dir = downloads_dir
        self._log = logger
        self._browser: _Session | None = None
        self._sessions: dict[str, _Session] = {}
        """Per page target id; a target gone from /json/list loses its session."""
        self._downloads_per_page = False  # Browser.setDownloadBehavior was refused; set it on each page instead
        self._lock = asyncio.Lock()

    async def navigate(self, args: dict[str, Any]) -> dict[str, Any]:
        url = cast(str, require(args, "url", str))
        scheme = urlsplit(url).scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise bad_request(f"URL scheme {scheme!r} is not allowed; use one of {', '.join(ALLOWED_SCHEMES)}")
        timeout = float(cast(float, require(args, "timeout", (int, float), 30.0)))
        if not 0 < timeout <= MAX_NAVIGATION_TIMEOUT:
            raise bad_request(f"argument 'timeout' must be in (0, {MAX_NAVIGATION_TIMEOUT:g}] seconds, got {timeout}")
        wait = cast(str, require(args, "wait", str, "load"))
        if wait not in (*_WAIT_EVENTS, "none"):
            raise bad_request(f"argument 'wait' must be one of load, domcontentloaded, none; got {wait!r}")
        page = await self._connect(page_arg(args))
        with page.events("Page.frameNavigated", _WAIT_EVENTS.get(wait, "")) as events:
            try:
                async with asyncio.timeout(timeout):
                    result = await page.call("Page.navigate", {"url": url}, timeout=None)
                    error = result.get("errorText")
                    if wait != "none" and not error and result.get("loaderId"):
                        await _wait_for_load(events, result["loaderId"])
            except CdpError as e:
                raise bad_request(f"cannot navigate to {url!r}: {e.cdp_message}") from e
            except TimeoutError as e:
                message = f"navigation to {url} did not reach {wait!r} within {timeout:g} s"
                raise AgentError(ErrorCode.TIMEOUT, message) from e
        state = await self._state(page)
        if error:
            state["url"] = state["url"] or url
            state["error"] = error
        elif wait != "none":
            status = await self._evaluate(page, _STATUS_JS, await_promise=False)
            if isinstance(status, int) and status > 0:
                state["status"] = status
        return state

    async def evaluate(self, args: dict[str, Any]) -> dict[str, Any]:
        expression = cast(str, require(args, "expression", str))
        await_promise = cast(bool, require(args, "await_promise", bool, True))
        page = await self._connect(page_arg(args))
        return {"value": await self._evaluate(page, expression, await_promise=await_promise)}

    async def info(self, args: dict[str, Any]) -> dict[str, Any]:
        return await self._state(await self._connect(page_arg(args)))

    async def page_screenshot(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        from PIL import Image

        fmt = cast(str, require(args, "format", str, "png")).lower()
        if fmt == "jpg":
            fmt = "jpeg"
        if fmt not in ("png", "jpeg"):
            raise bad_request(f"argument 'format' must be 'png' or 'jpeg', got {fmt!r}")
        params: dict[str, Any] = {"format": fmt}
        if fmt == "jpeg":
            quality = cast(int, require(args, "quality", int, 80))
            if not 1 <= quality <= 100:
                raise bad_request(f"argument 'quality' must be between 1 and 100, got {quality}")
            params["quality"] = quality
        page = await self._connect(page_arg(args))
        data = base64.b64decode((await page.call("Page.captureScreenshot", params))["data"])
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
        return {"width": width, "height": height, "format": fmt}, data

    async def check(self) -> dict[str, Any]:
        try:
            version = await self._http_json("/json/version")
            pages = _pages(await self._http_json("/json/list"))
        except AgentError as e:
            return {"ok": False, "detail": e.message}
        where = f"{version.get('Browser', 'Chromium')} answers on 127.0.0.1:{self._port}"
        if not pages:
            return {"ok": False, "detail": f"{where} but has no page target"}
        return {"ok": True, "detail": f"{where}; {len(pages)} page(s), active: {pages[0].get('url')}"}

    async def close(self) -> None:
        for session in (*self._sessions.values(), self._browser):
            if session is not None:
                await session.close()
        self._sessions.clear()
        self._browser = None

    async def browser_session(self) -> _Session:
        """The session of the browser target (Target.* commands), (re)connecting as needed."""
        async with self._lock:
            if self._browser is None or self._browser.closed:
                self._browser = await self._open_browser_session()
            return self._browser

    async def session(self, page_id: str | None) -> _Session:
        """The session of page ``page_id`` (the active page when None): for ``pages.py``."""
        return await self._connect(page_id)

    async def run_js(self, page: _Session, expression: str) -> Any:
        """The JSON value of ``expression`` in ``page`` (a promise is awaited); a JavaScript error is a bad request."""
        return await self._evaluate(page, expression, await_promise=True)

    async def page_targets(self) -> list[dict[str, Any]]:
        """The page targets, most recently active first."""
        return _pages(await self._http_json("/json/list"))

    async def _connect(self, page_id: str | None = None) -> _Session:
        """The session of page ``page_id``, or of the active page (the most recently focused tab) when None,
        (re)connecting as needed."""
        async with self._lock:
            if self._browser is None or self._browser.closed:
                self._browser = await self._open_browser_session()
            pages = _pages(await self._http_json("/json/list"))
            known = {str(p["id"]) for p in pages}
            for gone in [t for t, s in self._sessions.items() if t not in known or s.closed]:
                await self._sessions.pop(gone).close()
            if page_id is not None:
                if page_id not in known:
                    raise AgentError(ErrorCode.NOT_FOUND, f"no page {page_id!r} is open (page_list lists them)")
                target_id = page_id
            elif pages:
                target_id = str(pages[0]["id"])
            else:
                target_id = (await self._browser.call("Target.createTarget", {"url": "about:blank"}))["targetId"]
                self._log.info("no page target in Chromium: opened %s", target_id)
            found = self._sessions.get(target_id)
            if found is not None:
                return found
            page = await _Session.open(f"ws://127.0.0.1:{self._port}/devtools/page/{target_id}", target_id)
            try:
                await page.call("Page.enable")
                if self._downloads_per_page:
                    await page.call("Page.setDownloadBehavior", self._download_behavior())
            except BaseException:
                await page.close()
                raise
            self._sessions[target_id] = page
            return page

    async def _open_browser_session(self) -> _Session:
        url = (await self._http_json("/json/version")).get("webSocketDebuggerUrl")
        if not isinstance(url, str):
            raise AgentError(ErrorCode.UNAVAILABLE, "Chromium's /json/version has no webSocketDebuggerUrl")
        session = await _Session.open(url, "browser")
        try:
            await session.call("Browser.setDownloadBehavior", {**self._download_behavior(), "eventsEnabled": True})
            self._downloads_per_page = False
        except CdpError as e:
            self._log.warning("Browser.setDownloadBehavior failed (%s); setting it per page", e.message)
            self._downloads_per_page = True
        except BaseException:
            await session.close()
            raise
        return session

    def _download_behavior(self) -> dict[str, Any]:
        return {"behavior": "allow", "downloadPath": self._downloads_dir}

    async def _state(self, page: _Session) -> dict[str, Any]:
        info = (await page.call("Target.getTargetInfo"))["targetInfo"]
        return {"url": info.get("url", ""), "title": info.get("title", "")}

    async def _evaluate(self, page: _Session, expression: str, *, await_promise: bool) -> Any:
        params = {"expression": expression, "awaitPromise": await_promise, "returnByValue": True, "userGesture": True}
        try:
            # No command timeout: a slow promise is bounded by the request's deadline.
            result = await page.call("Runtime.evaluate", params, timeout=None)
        except CdpError as e:
            raise bad_request(f"cannot evaluate the expression: {e.cdp_message}") from e
        details = result.get("exceptionDetails")
        if details is not None:
            text = (details.get("exception") or {}).get("description") or details.get("text", "unknown error")
            raise bad_request(f"JavaScript error: {text}")
        remote = result.get("result", {})
        # NaN, Infinity, -0 and bigints have no JSON form; Chromium sends them as strings.
        return remote.get("value", remote.get("unserializableValue"))

    async def _http_json(self, path: str) -> Any:
        """GET a DevTools HTTP endpoint over asyncio streams (Chromium drops HTTP/1.0 requests: use 1.1)."""
        where = f"127.0.0.1:{self._port}"
        try:
            async with asyncio.timeout(HTTP_TIMEOUT):
                reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
                try:
                    writer.write(f"GET {path} HTTP/1.1\r\nHost: {where}\r\nConnection: close\r\n\r\n".encode())
                    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                    headers = dict(
                        (name.strip().lower(), value.strip())
                        for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:])
                    )
                    length = headers.get("content-length")
                    body = await (reader.readexactly(int(length)) if length else reader.read())
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"Chromium DevTools is not reachable on {where}: {e!r}") from e
        status = head.split(" ", 2)[1] if head.count(" ") >= 1 else "?"
        if status != "200":
            raise AgentError(ErrorCode.UNAVAILABLE, f"Chromium DevTools answered {path} with HTTP {status}")
        try:
            return json.loads(body)
        except ValueError as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"Chromium DevTools sent bad JSON for {path}: {e}") from e


class _Session:
    """One DevTools websocket: commands matched to replies by id, events fanned out to subscribers."""

    def __init__(self, ws: Any, target_id: str) -> None:
        self.target_id = target_id
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[str, asyncio.Future[dict[str, Any]]]] = {}
        self._subscribers: list[tuple[frozenset[str], asyncio.Queue[Event]]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, target_id: str) -> _Session:
        import websockets

        try:
            ws = await websockets.connect(
                url, open_timeout=HTTP_TIMEOUT, ping_interval=None, max_size=MAX_MESSAGE_BYTES, close_timeout=1
            )
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"cannot open the DevTools websocket {url}: {e!r}") from e
        return cls(ws, target_id)

    @property
    def closed(self) -> bool:
        return self._reader.done()

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = COMMAND_TIMEOUT
    ) -> dict[str, Any]:
        import websockets

        if self.closed:
            raise AgentError(ErrorCode.UNAVAILABLE, "the DevTools connection is closed")
        message_id = next(self._ids)
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message_id] = (method, reply)
        try:
            await self._ws.send(json.dumps({"id": message_id, "method": method, "params": params or {}}))
            return await asyncio.wait_for(reply, timeout)
        except TimeoutError as e:
            raise AgentError(ErrorCode.TIMEOUT, f"Chromium did not answer {method} within {timeout:g} s") from e
        except websockets.exceptions.ConnectionClosed as e:
            raise AgentError(ErrorCode.UNAVAILABLE, f"the DevTools connection closed during {method}") from e
        finally:
            self._pending.pop(message_id, None)

    @contextlib.contextmanager
    def events(self, *methods: str) -> Iterator[asyncio.Queue[Event]]:
        """Queue the named events from now until the block ends; ("", {}) means the connection closed."""
        entry: tuple[frozenset[str], asyncio.Queue[Event]] = (frozenset(methods), asyncio.Queue())
        self._subscribers.append(entry)
        try:
            yield entry[1]
        finally:
            self._subscribers.remove(entry)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
        with contextlib.suppress(Exception):
            await self._ws.close()

    async def _read(self) -> None:
        import websockets

        try:
            async for raw in self._ws:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                if "id" in message:
                    method, reply = self._pending.get(message["id"], ("", None))
                    if reply is None or reply.done():
                        continue
                    error = message.get("error")
                    if error is not None:
                        reply.set_exception(CdpError(method, str(error.get("message", error))))
                    else:
                        reply.set_result(message.get("result", {}))
                else:
                    for methods, queue in self._subscribers:
                        if message.get("method") in methods:
                            queue.put_nowait((message["method"], message.get("params", {})))
        except websockets.exceptions.ConnectionClosed:
            pass
        finally:
            for _, reply in self._pending.values():
                if not reply.done():
                    reply.set_exception(AgentError(ErrorCode.UNAVAILABLE, "the DevTools connection closed"))
            for _, queue in self._subscribers:
                queue.put_nowait(("", {}))


async def _wait_for_load(events: asyncio.Queue[Event], loader_id: str) -> None:
    """Wait for the awaited load event that follows the commit of this navigation's main-frame document."""
    committed = False
    while True:
        method, params = await events.get()
        if not method:
            raise AgentError(ErrorCode.UNAVAILABLE, "the DevTools connection closed during navigation")
        if method == "Page.frameNavigated":
            frame = params.get("frame", {})
            if not frame.get("parentId"):
                committed = frame.get("loaderId") == loader_id
        elif committed:
            return


def page_arg(args: dict[str, Any]) -> str | None:
    page = require(args, "page", str, None)
    if page is not None and not 0 < len(page) <= 64:
        raise bad_request("argument 'page' must be a page id (1-64 characters)")
    return page


def _pages(targets: Any) -> list[dict[str, Any]]:
    """Page targets, most recently active first (the order /json/list uses)."""
    if not isinstance(targets, list):
        raise AgentError(ErrorCode.UNAVAILABLE, "Chromium's /json/list did not return a list")
    return [t for t in targets if isinstance(t, dict) and t.get("type") == "page" and "id" in t]
