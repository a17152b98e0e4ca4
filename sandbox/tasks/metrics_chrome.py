"""OSWorld's Chrome metrics that need nothing beyond the getters' values."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse, urlunparse

from sandbox.tasks.matching import are_lists_equal, compare_urls


def _url(info: Any) -> Any:
    return info.get("url") if isinstance(info, dict) else info


def is_expected_active_tab(active_tab_info: Any, rule: dict[str, Any], **_: Any) -> float:
    if not active_tab_info or rule.get("type") != "url":
        return 0.0
    return 1.0 if compare_urls(rule["url"], _url(active_tab_info)) else 0.0


def is_expected_active_tab_approximate(active_tab_info: Any, rule: dict[str, Any], **_: Any) -> float:
    if not active_tab_info or rule.get("type") != "url":
        return 0.0

    def strip_query(url: str) -> str:
        return urlunparse(urlparse(url)._replace(query=""))

    return 1.0 if strip_query(rule["url"]) == strip_query(str(_url(active_tab_info))) else 0.0


def is_expected_url_pattern_match(result: Any, rules: dict[str, Any], **_: Any) -> float:
    url = _url(result)
    if not url or not isinstance(url, str):
        return 0.0
    return 1.0 if all(re.search(p, url) for p in rules["expected"]) else 0.0


def is_expected_tabs(open_tabs: Any, rule: dict[str, Any], **_: Any) -> float:
    if not open_tabs or rule.get("type") != "url":
        return 0.0
    return 1.0 if are_lists_equal(rule["urls"], [t["url"] for t in open_tabs], compare_urls) else 0.0


def is_expected_bookmarks(bookmarks: Any, rule: dict[str, Any], **_: Any) -> float:
    if not bookmarks:
        return 0.0
    bar = bookmarks["bookmark_bar"]["children"]
    kind = rule["type"]
    if kind == "bookmark_bar_folders_names":
        return 1.0 if {b["name"] for b in bar if b["type"] == "folder"} == set(rule["names"]) else 0.0
    if kind == "bookmark_bar_websites_urls":
        return 1.0 if {b["url"] for b in bar if b["type"] == "url"} == set(rule["urls"]) else 0.0
    if kind == "liked_authors_websites_urls":
        folder = next((b for b in bar if b["type"] == "folder" and b["name"] == "Liked Authors"), None)
        if folder is None:
            return 0.0
        urls = {b["url"] for b in folder["children"] if b["type"] == "url"}
        options = [[u] if isinstance(u, str) else list(u) for u in rule["urls"]]
        return 1.0 if any(set(combo) == urls for combo in itertools.product(*options)) else 0.0
    raise ValueError(f"is_expected_bookmarks: rule type {kind!r} is not supported")


def is_expected_search_query(active_tab_info: Any, rules: dict[str, Any], **_: Any) -> float:
    if not active_tab_info:
        return 0.0
    return 1.0 if re.search(rules["expect"]["pattern"], active_tab_info["url"]) else 0.0


def is_cookie_deleted(cookie_data: Any, rule: dict[str, Any], **_: Any) -> float:
    if rule.get("type") != "domains":
        raise ValueError(f"is_cookie_deleted: rule type {rule.get('type')!r} is not supported")
    domains = [cookie[1] for cookie in cookie_data or []]
    return 0.0 if any(compare_urls(d, c) for d in rule["domains"] for c in domains) else 1.0


def check_history_deleted(history_data: Any, rule: dict[str, Any], **_: Any) -> float:
    if rule.get("type") != "keywords":
        raise ValueError(f"check_history_deleted: rule type {rule.get('type')!r} is not supported")
    urls = [row[0] for row in history_data or []]
    return 0.0 if any(k in u for k in rule["keywords"] for u in urls) else 1.0


def check_enabled_experiments(enabled_experiments: Any, rule: dict[str, Any], **_: Any) -> float:
    if rule.get("type") != "names":
        raise ValueError(f"check_enabled_experiments: rule type {rule.get('type')!r} is not supported")
    names = [e.split("@")[0] for e in enabled_experiments or []]
    return 1.0 if names == rule["names"] else 0.0


def check_font_size(font_size: Any, rule: dict[str, Any], **_: Any) -> float:
    size = font_size["default_font_size"]
    if rule["type"] == "value":
        return 1.0 if size == rule["value"] else 0.0
    if rule["type"] == "range":
        return 1.0 if rule["min"] < size < rule["max"] else 0.0
    raise ValueError(f"check_font_size: rule type {rule['type']!r} is not supported")


def is_shortcut_on_desktop(shortcuts: Any, rule: dict[str, Any], **_: Any) -> float:
    kind = rule["type"]
    if kind not in ("name", "exec"):
        raise ValueError(f"is_shortcut_on_desktop: rule type {kind!r} is not supported")
    key = "Name=" if kind == "name" else "Exec="
    want = rule[kind]
    for content in (shortcuts or {}).values():
        if f"{key}{want}\n" in content:
            return 1.0
        for line in content.split("\n"):
            if line.startswith(key):
                got = line[len(key) :]
                if kind == "name" and (want.lower() in got.lower() or got.lower() in want.lower()):
                    return 1.0
                if kind == "exec" and (want in got or got in want):
                    return 1.0
    return 0.0


def is_added_to_steam_cart(active_tab_info: Any, rule: dict[str, Any], **_: Any) -> float:
    content = (active_tab_info or {}).get("content") or ""
    return 1.0 if all(item in content for item in rule["items"]) else 0.0


def is_expected_installed_extensions(installed_extensions: Any, expected: dict[str, Any], **_: Any) -> float:
    if not installed_extensions:
        return 0.0
    return 1.0 if set(expected["expected"]) <= set(installed_extensions) else 0.0


CHROME_METRICS: dict[str, Callable[..., float]] = {
    fn.__name__: fn
    for fn in (
        is_expected_active_tab, is_expected_active_tab_approximate, is_expected_url_pattern_match, is_expected_tabs,
        is_expected_bookmarks, is_expected_search_query, is_cookie_deleted, check_history_deleted,
        check_enabled_experiments, check_font_size, is_shortcut_on_desktop, is_added_to_steam_cart,
        is_expected_installed_extensions,
    )
}  # fmt: skip
