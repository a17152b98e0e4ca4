"""Wires the agent's components into the op table for one sandbox kind."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from sandbox import __version__
from sandbox.agent.errors import AgentError, require
from sandbox.agent.files import Files
from sandbox.agent.ports import listening_ports
from sandbox.agent.server import Handler
from sandbox.agent.shell import Shell
from sandbox.protocol import PROTOCOL_VERSION, ErrorCode

KINDS = ("terminal", "desktop", "browser", "android")
GUI_KINDS = ("desktop", "browser")
VNC_PORT = 5900
CDP_PORT = 9222


@dataclass(frozen=True)
class AgentConfig:
    kind: str
    socket_path: str
    """The unix socket to serve ("": none)."""
    roots: tuple[str, ...]
    workspace: str
    display: str
    cdp_port: int = CDP_PORT
    max_request_bytes: int = 256 * 1024 * 1024
    listen: tuple[str, int] | None = None
    """(host, port) to serve over TCP, every connection authenticated with the token file; None: no TCP."""
    token_file: str | None = None
    hello_timeout: float = 5.0
    """Seconds a TCP peer has to send its hello before the agent hangs up."""
    lane_socket_path: str = ""
    """The direct lanes' unix socket ("": none; ``lanes.py``)."""


def _unsupported(kind: str, what: str) -> AgentError:
    return AgentError(ErrorCode.BAD_REQUEST, f"a {kind} sandbox has no {what}")


class AgentApp:
    """Holds the components a kind has and answers ops with them."""

    def __init__(self, config: AgentConfig, *, logger: logging.Logger) -> None:
        self.config = config
        self._log = logger
        self._started = time.time()
        self.shell = Shell(default_cwd=config.workspace, logger=logger)
        self.files = Files(roots=config.roots, default_dir=config.workspace)
        self.display: Any = None
        self.browser: Any = None
        self.pages: Any = None
        if config.kind in GUI_KINDS:
            from sandbox.agent.display.service import Display

            self.display = Display(config.display, logger=logger)
        if config.kind == "browser":
            from sandbox.agent.browser import Browser
            from sandbox.agent.pages import Pages

            self.browser = Browser(cdp_port=config.cdp_port, downloads_dir=config.workspace, logger=logger)
            self.pages = Pages(self.browser, logger=logger)
        if config.kind == "android":  # the emulator stands in for the display: screenshot and action ops work
            from sandbox.agent.android.driver import AndroidDriver

            self.display = AndroidDriver.from_env(logger=logger)

    def ops(self) -> dict[str, Handler]:
        return {
            "ping": self.ping,
            "health": self.health,
            "exec": self.shell.exec,
            "session_close": self.shell.close_session,
            "session_list": self.shell.list_sessions,
            "file_read": self.files.read,
            "file_write": self.files.write,
            "file_list": self.files.list_dir,
            "file_stat": self.files.stat,
            "file_delete": self.files.delete,
            "file_mkdir": self.files.mkdir,
            "screenshot": self.screenshot,
            "action": self.action,
            "browser_navigate": self._browser_op("navigate"),
            "browser_evaluate": self._browser_op("evaluate"),
            "browser_info": self._browser_op("info"),
            "browser_screenshot": self.browser_screenshot,
            "page_open": self._pages_op("open"),
            "page_close": self._pages_op("close"),
            "page_list": self._pages_op("list_pages"),
            "page_clock": self._pages_op("clock"),
            "page_key": self._pages_op("key"),
            "page_click": self._pages_op("click"),
            "ports": self.ports,
            "android": self.android,
        }

    def tunnel_ports(self) -> frozenset[int]:
        ports = {VNC_PORT} if self.config.kind in GUI_KINDS else set()
        if self.config.kind == "browser":
            ports.add(self.config.cdp_port)
        return frozenset(ports)

    def reserved_ports(self) -> frozenset[int]:
        """The platform's ports, which a preview never reaches: VNC, the agent's TCP and, in a browser sandbox, the
        platform's Chromium's DevTools (on a desktop, a Chromium a task starts with DevTools on 9222 is the user's,
        and OSWorld's harness reaches it through a preview)."""
        ports = {VNC_PORT, *([self.config.cdp_port] if self.config.kind == "browser" else [])}
        if self.config.listen is not None:
            ports.add(self.config.listen[1])
        return frozenset(ports)

    async def ports(self, _args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        """The sandbox's listening TCP ports (from /proc/net/tcp and tcp6), each saying whether a preview reaches it."""
        found = await asyncio.to_thread(listening_ports, self.reserved_ports())
        return {"ports": found}, b""

    async def ping(self, _args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        return {
            "kind": self.config.kind,
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "uptime_s": round(time.time() - self._started, 3),
            "roots": self.files.roots,
        }, b""

    async def health(self, _args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        probes: dict[str, Any] = {"shell": self.shell.check(), "workspace": self.files.check()}
        if self.display is not None:
            probes["emulator" if self.config.kind == "android" else "x_server"] = self.display.check()
        if self.config.kind == "desktop":
            probes["window_manager"] = self.display.window_manager_check()
        if self.browser is not None:
            probes["browser"] = self.browser.check()
        results = await asyncio.gather(*(_bounded(p) for p in probes.values()))
        checks = dict(zip(probes, results, strict=True))
        return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}, b""

    async def screenshot(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        if self.display is None:
            raise _unsupported(self.config.kind, "display")
        result: tuple[dict[str, Any], bytes] = await self.display.screenshot(args)
        return result

    async def action(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        if self.display is None:
            raise _unsupported(self.config.kind, "display")
        action = require(args, "action", dict)
        return await self.display.act(action), b""

    async def android(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        """Android only (``android/driver.py``): ui_tree, ready, reset, record_start, record_stop."""
        if self.config.kind != "android":
            raise _unsupported(self.config.kind, "emulator")
        result: tuple[dict[str, Any], bytes] = await self.display.request(args)
        return result

    async def browser_screenshot(self, args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
        if self.browser is None:
            raise _unsupported(self.config.kind, "browser")
        result: tuple[dict[str, Any], bytes] = await self.browser.page_screenshot(args)
        return result

    def _browser_op(self, name: str) -> Handler:
        async def handler(args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
            if self.browser is None:
                raise _unsupported(self.config.kind, "browser")
            result: dict[str, Any] = await getattr(self.browser, name)(args)
            return result, b""

        return handler

    def _pages_op(self, name: str) -> Handler:
        """Several pages in a browser sandbox, each with its own clock (``pages.py``)."""

        async def handler(args: dict[str, Any], _: bytes) -> tuple[dict[str, Any], bytes]:
            if self.pages is None:
                raise _unsupported(self.config.kind, "browser")
            result: dict[str, Any] = await getattr(self.pages, name)(args)
            return result, b""

        return handler

    async def close(self) -> None:
        await self.shell.close()
        if self.browser is not None:
            await self.browser.close()
        if self.display is not None:
            self.display.close()


async def _bounded(probe: Any, timeout: float = 5.0) -> dict[str, Any]:
    try:
        result: dict[str, Any] = await asyncio.wait_for(probe, timeout)
        return result
    except TimeoutError:
        return {"ok": False, "detail": f"no answer within {timeout:g} s"}
    except AgentError as e:
        return {"ok": False, "detail": e.message}
    except Exception as e:
        return {"ok": False, "detail": f"{type(e).__name__}: {e}"}
