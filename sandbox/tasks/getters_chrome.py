"""OSWorld's Chrome getters that run offline, answered from this platform's Chromium.

From the live browser: ``active_url_from_accessTree`` (the active tab's URL, read from the browser instead of the
accessibility tree, so complete: ``goto_prefix`` is not added), ``active_tab_url_parse`` (``parse_keys`` of its
query, renamed by ``replace``), ``active_tab_info`` (``{"title", "url", "content"}`` of the active tab, content its
HTML), ``open_tabs_info`` (``[{"title", "url"}]`` of every tab, most recently active first).

From Chromium's profile files (``~/.config/chromium``, where OSWorld reads ``~/.config/google-chrome``):
``bookmarks`` (``roots`` of ``Default/Bookmarks``), ``history`` (``(url, title, last_visit_time)`` rows of
``Default/History``), ``cookie_data`` (every row of the cookies table), ``default_search_engine``,
``profile_name``, ``chrome_font_size`` (``Default/Preferences``), ``enabled_experiments``, ``chrome_language``
(``Local State``), and ``shortcuts_on_desktop`` (``{name: content}`` of ``~/Desktop/*.desktop``). Chromium writes
these files a few seconds after a change (History in batches), as Chrome does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

from sandbox.tasks import osworld
from sandbox.tasks.runtime import EvalContext
from sandbox.tasks.transfer import get_file

PROFILE = f"{osworld.CHROME_PROFILE}/Default"
LOCAL_STATE = f"{osworld.CHROME_PROFILE}/Local State"
DEFAULT_FONT_SIZES = {"default_fixed_font_size": 13, "default_font_size": 16, "minimum_font_size": 13}

ChromeGetter = Callable[[EvalContext, dict[str, Any]], Awaitable[Any]]


async def active_url_from_accessTree(ctx: EvalContext, config: dict[str, Any]) -> Any:
    url = (await ctx.runtime.browser_info()).get("url")
    return url or None


async def active_tab_url_parse(ctx: EvalContext, config: dict[str, Any]) -> Any:
    url = await active_url_from_accessTree(ctx, config)
    if url is None:
        return None
    query = parse_qs(urlparse(url).query)
    params = {key: query.get(key, [""])[0] for key in config.get("parse_keys", [])}
    for old, new in (config.get("replace") or {}).items():
        if old in params:
            params[new] = params.pop(old)
    return params


async def active_tab_info(ctx: EvalContext, config: dict[str, Any]) -> Any:
    info = await ctx.runtime.browser_info()
    if not info.get("url"):
        return None
    content = await ctx.runtime.evaluate_js("document.documentElement ? document.documentElement.outerHTML : ''")
    return {"title": info.get("title", ""), "url": info["url"], "content": content or ""}


async def open_tabs_info(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return [{"title": t.get("title", ""), "url": t.get("url", "")} for t in await ctx.runtime.browser_tabs()]


async def _json_file(ctx: EvalContext, path: str) -> Any:
    data = await get_file(ctx.runtime, path)
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


async def _sqlite_rows(ctx: EvalContext, paths: tuple[str, ...], query: str) -> list[tuple[Any, ...]] | None:
    for path in paths:
        data = await get_file(ctx.runtime, path)
        if data is not None:
            return await asyncio.to_thread(_query, data, query)
    return None


def _query(data: bytes, query: str) -> list[tuple[Any, ...]] | None:
    fd, name = tempfile.mkstemp(suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        with contextlib.closing(sqlite3.connect(name)) as db:
            return list(db.execute(query).fetchall())
    except sqlite3.Error:
        return None
    finally:
        os.unlink(name)


async def bookmarks(ctx: EvalContext, config: dict[str, Any]) -> Any:
    data = await _json_file(ctx, f"{PROFILE}/Bookmarks")
    return data.get("roots", {}) if isinstance(data, dict) else []


async def history(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return await _sqlite_rows(ctx, (f"{PROFILE}/History",), "SELECT url, title, last_visit_time FROM urls")


async def cookie_data(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return await _sqlite_rows(ctx, (f"{PROFILE}/Cookies", f"{PROFILE}/Network/Cookies"), "SELECT * FROM cookies")


def _dig(data: Any, *keys: str, default: Any) -> Any:
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


async def default_search_engine(ctx: EvalContext, config: dict[str, Any]) -> Any:
    prefs = await _json_file(ctx, f"{PROFILE}/Preferences")
    return _dig(prefs, "default_search_provider_data", "template_url_data", "short_name", default="Google")


async def profile_name(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return _dig(await _json_file(ctx, f"{PROFILE}/Preferences"), "profile", "name", default=None)


async def chrome_font_size(ctx: EvalContext, config: dict[str, Any]) -> Any:
    prefs = await _json_file(ctx, f"{PROFILE}/Preferences")
    return _dig(prefs, "webkit", "webprefs", default=dict(DEFAULT_FONT_SIZES))


async def enabled_experiments(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return _dig(await _json_file(ctx, LOCAL_STATE), "browser", "enabled_labs_experiments", default=[])


async def chrome_language(ctx: EvalContext, config: dict[str, Any]) -> Any:
    return _dig(await _json_file(ctx, LOCAL_STATE), "intl", "app_locale", default="en-US")


async def shortcuts_on_desktop(ctx: EvalContext, config: dict[str, Any]) -> Any:
    desktop = f"{osworld.SANDBOX_HOME}/Desktop"
    listed = await ctx.runtime.exec(["find", desktop, "-maxdepth", "1", "-name", "*.desktop", "-type", "f"], timeout=30)
    shortcuts: dict[str, str] = {}
    for path in sorted(listed.stdout.split("\n")):
        data = await get_file(ctx.runtime, path) if path else None
        if data is not None:
            shortcuts[os.path.basename(path)] = data.decode("utf-8", errors="replace")
    return shortcuts


CHROME_GETTERS: dict[str, ChromeGetter] = {
    "active_url_from_accessTree": active_url_from_accessTree,
    "active_tab_url_parse": active_tab_url_parse,
    "active_tab_info": active_tab_info,
    "open_tabs_info": open_tabs_info,
    "bookmarks": bookmarks,
    "history": history,
    "cookie_data": cookie_data,
    "default_search_engine": default_search_engine,
    "profile_name": profile_name,
    "chrome_font_size": chrome_font_size,
    "enabled_experiments": enabled_experiments,
    "chrome_language": chrome_language,
    "shortcuts_on_desktop": shortcuts_on_desktop,
}
NEEDS_BROWSER = frozenset({"active_url_from_accessTree", "active_tab_url_parse", "active_tab_info", "open_tabs_info"})
"""Getters that ask the live browser."""
NEEDS_CHROMIUM = frozenset(CHROME_GETTERS) - NEEDS_BROWSER - {"shortcuts_on_desktop"}
"""Getters that read Chromium's profile: the terminal sandbox has no Chromium."""
