"""Browser pages and their clocks as step actions (``models.PAGE_ACTIONS``), for ``acting``: several game sessions
in one browser sandbox, each a page with its own clock, input and screenshot (``sandbox/agent/pages.py``)."""

from __future__ import annotations

from typing import Any

from sandbox.backends.agent_client import AgentClient
from sandbox.models import Action, Clock, Evaluate, Navigate, PageClick, PageClose, PageKey, PageOpen, Screenshot

PageAction = PageOpen | PageClose | Clock | PageKey | PageClick


async def act_on_page(agent: AgentClient, action: PageAction) -> dict[str, Any]:
    """Do one page action; the observation's fields it yields (results in ``value``)."""
    if isinstance(action, PageOpen):
        opened = await agent.page_open(action.url, clock=action.clock, factor=action.factor, timeout=action.timeout)
        value = {"page": opened["page"], "clock": opened.get("clock"), "status": opened.get("status")}
        return {"url": opened.get("url"), "title": opened.get("title"), "value": value}
    if isinstance(action, PageClose):
        closed = await agent.page_close(action.page)
        return {"value": {"closed": closed["closed"], "pages": closed["pages"]}}
    if isinstance(action, Clock):
        state = await agent.clock(action.op, page=action.page, ms=action.ms, factor=action.factor)
        return {"value": {"clock": state}}
    if isinstance(action, PageKey):
        await agent.page_key(action.key, page=action.page)
    else:
        await agent.page_click(action.x, action.y, page=action.page, button=action.button, count=action.count)
    return {}


async def step_screenshot(agent: AgentClient, action: Action, obs: dict[str, Any]) -> Screenshot:
    """The screenshot after a step: the page's that the action acted in (page actions but ``page_close``, and
    navigate or evaluate naming a ``page``), else the screen's."""
    if isinstance(action, PageOpen) and isinstance(obs.get("value"), dict):
        return await agent.page_screenshot(page=obs["value"]["page"])
    if isinstance(action, Clock | PageKey | PageClick) or (isinstance(action, Navigate | Evaluate) and action.page):
        return await agent.page_screenshot(page=action.page)
    return await agent.screenshot()
