"""The browser getters on a desktop: the service's runtime asks the Chromium a task started over its DevTools, from
inside the sandbox (``scripts.CDP``), since a desktop's agent drives no browser; a browser sandbox keeps the agent.

The CDP program itself runs here against a fake DevTools endpoint (HTTP ``/json/*`` and a page's websocket)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from http import HTTPStatus
from typing import Any, cast

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import InvalidArgument
from sandbox.models import ExecResult, SandboxKind, SandboxSpec
from sandbox.service.task_runtime import AgentRuntime
from sandbox.tasks import Fixtures, scripts
from sandbox.tasks.getters import get
from sandbox.tasks.runtime import EvalContext
from tests.unit.tasks.test_setup import ok

TABS = [
    {"id": "P2", "url": "file:///home/sandbox/Desktop/site/news.html", "title": "Daily News"},
    {"id": "P1", "url": "about:blank", "title": ""},
]


class FakeAgent:
    """An agent whose exec runs ``scripts.CDP`` as a Chromium with TABS open would answer (ops list and evaluate);
    its own browser ops answer for the browser sandbox's Chromium."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.execs: list[list[str]] = []
        self.calls: list[tuple[str, Any]] = []

    async def exec(self, cmd: list[str], *, timeout: float = 60.0, **_: Any) -> ExecResult:
        self.execs.append(cmd)
        assert cmd[:3] == ["python3", "-c", scripts.CDP]
        op, args = cmd[3], cmd[4:]
        if op == "list":
            return ok(json.dumps(TABS))
        assert op == "evaluate" and float(args[1]) < timeout
        if args[0] not in self.values:
            return ok(stderr="Traceback...\nJavaScript error: ReferenceError: nope is not defined", code=1)
        return ok(json.dumps(self.values[args[0]]))

    async def evaluate(self, expression: str) -> Any:
        self.calls.append(("evaluate", expression))
        return "the agent's page"

    async def browser_info(self) -> dict[str, Any]:
        self.calls.append(("browser_info", None))
        return {"url": "https://agent.test/", "title": "Agent"}


def runtime(kind: SandboxKind, agent: FakeAgent) -> AgentRuntime:
    return AgentRuntime(cast(AgentClient, agent), SandboxSpec(kind=kind))


async def test_a_desktop_evaluates_and_reads_the_active_tab_over_devtools_in_the_sandbox() -> None:
    html = "<html><head><title>Daily News</title></head></html>"
    agent = FakeAgent(
        {"document.title": "Daily News", "document.documentElement ? document.documentElement.outerHTML : ''": html}
    )
    ctx = EvalContext(runtime(SandboxKind.DESKTOP, agent), Fixtures())
    assert await get(ctx, "browser_evaluate", {"expression": "document.title"}) == "Daily News"
    assert await get(ctx, "active_tab_info", {}) == {"title": "Daily News", "url": TABS[0]["url"], "content": html}
    assert await get(ctx, "active_url_from_accessTree", {}) == TABS[0]["url"]
    assert agent.calls == []  # never the agent's browser ops, which a desktop's agent has not
    assert [c[3] for c in agent.execs] == ["evaluate", "list", "evaluate", "list"]
    with pytest.raises(InvalidArgument, match="JavaScript error: ReferenceError: nope is not defined"):
        await get(ctx, "browser_evaluate", {"expression": "nope"})


async def test_a_browser_sandbox_keeps_the_agents_browser() -> None:
    agent = FakeAgent({})
    ctx = EvalContext(runtime(SandboxKind.BROWSER, agent), Fixtures())
    assert await get(ctx, "browser_evaluate", {"expression": "document.title"}) == "the agent's page"
    assert (await get(ctx, "active_tab_info", {}))["url"] == "https://agent.test/"
    assert agent.execs == []


class FakeDevTools:
    """Chromium's DevTools on a free port: ``/json/version``, ``/json/list`` (a service worker before the pages), and
    each page's websocket answering Runtime.evaluate from ``answers`` (an expression: its successive replies)."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []  # (page id, Runtime.evaluate params)
        self.websockets = 0

    def http(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/json/version":
            return connection.respond(HTTPStatus.OK, "{}")
        if request.path == "/json/list":
            targets = [{"id": "SW", "type": "service_worker", "url": "chrome://sw"}]
            return connection.respond(HTTPStatus.OK, json.dumps(targets + [{**t, "type": "page"} for t in TABS]))
        return None  # a page's websocket

    async def page(self, ws: ServerConnection) -> None:
        self.websockets += 1
        target = ws.request.path.rsplit("/", 1)[-1] if ws.request else "?"
        async for message in ws:
            call = json.loads(message)
            assert call["method"] == "Runtime.evaluate"
            self.asked.append((target, call["params"]))
            await ws.send(json.dumps({"method": "Runtime.executionContextCreated", "params": {}}))  # an event first
            await ws.send(json.dumps({"id": call["id"], **self.answers[call["params"]["expression"]].pop(0)}))

    async def run(self, *args: str) -> tuple[int, Any, str]:
        """``scripts.CDP`` with ``args``, against this endpoint: exit code, printed JSON, last line of stderr."""
        async with serve(self.page, "127.0.0.1", 0, process_request=self.http) as server:
            port = server.sockets[0].getsockname()[1]
            program = scripts.CDP.replace(repr(scripts.CDP_PORTS), repr((port,)))
            assert program != scripts.CDP
            env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", program, *args, env=env, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(process.communicate(), 30)
        code = process.returncode
        assert code is not None
        return code, json.loads(out) if code == 0 else None, (err.decode().strip().splitlines() or [""])[-1]


def value(v: Any) -> dict[str, Any]:
    return {"result": {"result": {"type": "object", "value": v}}}


def thrown(exception: dict[str, Any]) -> dict[str, Any]:
    return {"result": {"result": {}, "exceptionDetails": {"text": "Uncaught", "exception": exception}}}


async def test_cdp_evaluate_answers_from_the_most_recently_active_page() -> None:
    devtools = FakeDevTools(
        {
            "document.title": [value("Daily News")],
            "({a: [1, 2]})": [value({"a": [1, 2]})],
            "1/0": [{"result": {"result": {"type": "number", "unserializableValue": "Infinity"}}}],
            "missing()": [thrown({"description": "ReferenceError: missing is not defined\n    at <anonymous>:1:1"})],
            "throw 'boom'": [thrown({"type": "string", "value": "boom"})],
            "cut short": [{"error": {"code": -32000, "message": "Execution context was destroyed."}}],
        }
    )
    assert await devtools.run("evaluate", "document.title", "5") == (0, "Daily News", "")
    assert await devtools.run("evaluate", "({a: [1, 2]})", "5") == (0, {"a": [1, 2]}, "")
    assert await devtools.run("evaluate", "1/0", "5") == (0, "Infinity", "")
    assert devtools.asked[0] == ("P2", {"expression": "document.title", "awaitPromise": True, "returnByValue": True})
    assert {page for page, _ in devtools.asked} == {"P2"}  # the first page /json/list names, not the worker
    code, _, reason = await devtools.run("evaluate", "missing()", "5")
    assert code != 0 and reason == "JavaScript error: ReferenceError: missing is not defined"
    assert (await devtools.run("evaluate", "throw 'boom'", "5"))[2] == "JavaScript error: boom"
    code, _, reason = await devtools.run("evaluate", "cut short", "5")
    assert code != 0 and reason == "cannot evaluate the expression: Execution context was destroyed."


async def test_cdp_loaded_shares_the_websocket_and_asks_again_until_the_page_loaded() -> None:
    url = TABS[0]["url"]
    devtools = FakeDevTools({scripts.READY_JS: [{"error": {"message": "navigated"}}, value("about:blank"), value(url)]})
    assert await devtools.run("loaded", "P1", "5") == (0, url, "")
    assert [page for page, _ in devtools.asked] == ["P1"] * 3 and devtools.websockets == 1  # the tab by its id
    slow = FakeDevTools({scripts.READY_JS: [value("about:blank")] * 1000})
    code, _, reason = await slow.run("loaded", "P1", "0.3")
    assert code != 0 and reason == "still loading after 0.3 s"
