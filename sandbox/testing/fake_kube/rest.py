"""REST basics of the fake API server: Status errors, label and field selectors, JSON merge patches."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_MERGE_KEYS = {"containers": "name", "volumes": "name", "env": "name", "volumeMounts": "mountPath"}
_MERGE_KEYS["ownerReferences"] = "uid"


class ApiError(Exception):
    """An error answer: becomes a Status object with ``code``."""

    def __init__(self, code: int, reason: str, message: str, *, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.name, self.kind = code, reason, message, name, kind

    def status(self) -> dict[str, Any]:
        details = {k: v for k, v in (("name", self.name), ("kind", self.kind)) if v}
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', name=name, kind=resource)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------------- selectors


Requirement = tuple[str, str, frozenset[str]]
"""(key, operator: = != in notin exists !exists, values)."""


def parse_label_selector(raw: str) -> Callable[[dict[str, str]], bool]:
    """``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, ``a in (x,y)``, ``a notin (x,y)``, comma-separated (AND)."""
    requirements: list[Requirement] = []
    for term in re.findall(r"(?:[^,(]|\([^)]*\))+", raw or ""):
        term = term.strip()
        if not term:
            continue
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\(([^)]*)\)", term):
            values = frozenset(v.strip() for v in m.group(3).split(","))
            requirements.append((m.group(1), m.group(2), values))
        elif m := re.fullmatch(r"([^!=\s]+)\s*(!=|==|=)\s*(\S*)", term):
            requirements.append((m.group(1), "!=" if m.group(2) == "!=" else "=", frozenset({m.group(3)})))
        elif term.startswith("!"):
            requirements.append((term[1:].strip(), "!exists", frozenset()))
        elif LABEL_NAME.match(term.split("/")[-1]):
            requirements.append((term, "exists", frozenset()))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")

    def matches(labels: dict[str, str]) -> bool:
        return all(_satisfies(labels, requirement) for requirement in requirements)

    return matches


def _satisfies(labels: dict[str, str], requirement: Requirement) -> bool:
    key, op, values = requirement
    if op == "exists":
        return key in labels
    if op == "!exists":
        return key not in labels
    if op in ("=", "in"):
        return labels.get(key) in values
    return labels.get(key) not in values  # != and notin: a missing label matches, as on the real server


_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "status.phase": ("status", "phase"),
    # an Event's
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.name": ("involvedObject", "name"),
    "involvedObject.uid": ("involvedObject", "uid"),
    "reason": ("reason",),
    "type": ("type",),
}


def parse_field_selector(raw: str) -> Callable[[dict[str, Any]], bool]:
    terms: list[tuple[tuple[str, ...], bool, str]] = []
    for term in filter(None, (t.strip() for t in (raw or "").split(","))):
        m = re.fullmatch(r"([a-zA-Z.]+)\s*(!=|==|=)\s*(.*)", term)
        if not m or m.group(1) not in _FIELDS:
            raise ApiError(400, "BadRequest", f'"{term}" is not a known field selector')
        terms.append((_FIELDS[m.group(1)], m.group(2) == "!=", m.group(3)))

    def matches(obj: dict[str, Any]) -> bool:
        for path, negated, value in terms:
            found: Any = obj
            for key in path:
                found = found.get(key) if isinstance(found, dict) else None
            if (str(found if found is not None else "") == value) == negated:
                return False
        return True

    return matches


# ---------------------------------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any, *, strategic: bool = False) -> Any:
    """RFC 7386 JSON merge patch; ``strategic``: lists with a known patchMergeKey merge item by item."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise ApiError(400, "BadRequest", f"patch directive {key} is not supported by the fake API server")
        if value is None:
            result.pop(key, None)
        elif strategic and key in _MERGE_KEYS and isinstance(value, list) and isinstance(result.get(key), list):
            merged = {item.get(_MERGE_KEYS[key]): item for item in result[key] if isinstance(item, dict)}
            for item in value:
                k = item.get(_MERGE_KEYS[key])
                merged[k] = merge_patch(merged.get(k), item, strategic=True)
            result[key] = list(merged.values())
        else:
            result[key] = merge_patch(result.get(key), value, strategic=strategic)
    return result
