"""Comparison rules shared by OSWorld's metrics: URL equality, list equality under a comparison, ``{method, ref}``
value rules, record patterns, and the similarity ratio of ``fuzzy_match`` (rapidfuzz's ``fuzz.ratio``: twice the
longest common subsequence over the total length, computed exactly here without rapidfuzz)."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlparse, urlunparse

_COMPARISONS = {"eq", "ne", "le", "lt", "ge", "gt"}


def compare_urls(url1: str | None, url2: str | None) -> bool:
    """OSWorld's URL equality: scheme defaults to http, scheme and host lower-cased, ``www.`` dropped, a lone ``/``
    path ignored; query and fragment compared as they are."""
    if url1 is None or url2 is None:
        return url1 == url2

    def normalize(url: str) -> str:
        parsed = urlparse(url)
        path = parsed.path if parsed.path != "/" else ""
        netloc = parsed.netloc.lower().replace("www.", "")
        return urlunparse(parsed._replace(scheme=(parsed.scheme or "http").lower(), netloc=netloc, path=path))

    return normalize(url1) == normalize(url2)


def are_lists_equal(list1: Sequence[Any], list2: Sequence[Any], same: Callable[[Any, Any], bool]) -> bool:
    """Same length, and every item of the first has an equal one in the second (OSWorld's check, order ignored)."""
    if len(list1) != len(list2):
        return False
    return all(any(same(a, b) for b in list2) for a in list1)


def match_record(pattern: dict[str, Any], item: dict[str, Any]) -> bool:
    return all(k in item and item[k] == v for k, v in pattern.items())


def match_value_to_rule(value: Any, rule: dict[str, Any]) -> bool:
    """OSWorld's ``{"method": ..., "ref": ...}`` rules: ``re[.FLAG...]`` (search), ``eq ne le lt ge gt``,
    ``approx:THRESHOLD``, ``range.XY`` (X, Y each ``t``/``e``: open or closed bound), ``str_list_eq``,
    ``str_set_eq`` (comma-separated string against a list)."""
    method = str(rule["method"])
    ref = rule.get("ref")
    if method.startswith("re"):
        flags = functools.reduce(operator.or_, (getattr(re, f) for f in method.split(".")[1:]), re.RegexFlag(0))
        return re.search(str(ref), str(value), flags) is not None
    if method in _COMPARISONS:
        return bool(getattr(operator, method)(value, ref))
    if method.startswith("approx:"):
        try:
            return abs(float(value) - float(ref)) <= float(method.split(":", 1)[1])  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    if method.startswith("range.") and len(method) == 8 and isinstance(ref, list) and len(ref) == 2:
        left, right = method[6], method[7]
        return bool(getattr(operator, "l" + left)(ref[0], value) and getattr(operator, "l" + right)(value, ref[1]))
    if method in ("str_list_eq", "str_set_eq"):
        items = str(value).strip("\"'").split(",")
        if method == "str_list_eq":
            return items == list(ref or [])
        return set(items) == set(ref or [])
    raise ValueError(f"unknown rule method {method!r}")


def lcs_length(a: str, b: str) -> int:
    """The length of the longest common subsequence of ``a`` and ``b`` (bit-parallel, Allison-Dix/Hyyrö)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    masks: dict[str, int] = {}
    for i, ch in enumerate(b):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(b)) - 1
    v = full
    for ch in a:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return len(b) - bin(v).count("1")


def similarity(a: str, b: str) -> float:
    """rapidfuzz's ``fuzz.ratio(a, b) / 100``: 1 for two empty strings."""
    total = len(a) + len(b)
    return 1.0 if total == 0 else 2 * lcs_length(a, b) / total
