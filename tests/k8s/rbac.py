"""RBAC as the API server checks it, for the tests that compare a Role with the requests the fake API server logged
(``FakeApi.requests``: (method, path?query)): a request becomes (namespace, apiGroup, resource, verb, name) as the
authorizer sees it, and a rule allows it when its group, resource, verb (and resourceNames, if any) match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Call:
    namespace: str
    group: str
    resource: str
    verb: str
    name: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.group or 'core'}/{self.resource}{'/' + self.name if self.name else ''}{where}"


def to_call(method: str, path_qs: str) -> Call | None:
    """The authorizer's view of a request; None for discovery and /version (granted to every user)."""
    split = urlsplit(path_qs)
    query = parse_qs(split.query)
    parts = [p for p in split.path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None  # discovery of a group version
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name, sub = rest[0], (rest[1] if len(rest) > 1 else ""), (rest[2] if len(rest) > 2 else "")
    if sub:
        resource = f"{resource}/{sub}"
    watching = query.get("watch", [""])[0] in ("true", "1")
    verb = {
        ("GET", True): "get",
        ("GET", False): "watch" if watching else "list",
        ("POST", False): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }.get((method, bool(name)))
    if verb is None:
        raise AssertionError(f"no RBAC verb for {method} {path_qs}")
    return Call(namespace, group, resource, verb, name)


def grants(role: dict[str, Any]) -> set[tuple[str, str, str, str, str]]:
    """Every (namespace, group, resource, verb, resourceName or "") the Role's rules grant."""
    namespace = role["metadata"]["namespace"]
    out = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or [""]:
                        out.add((namespace, group, resource, verb, name))
    return out


def allowed_by(call: Call, granted: set[tuple[str, str, str, str, str]]) -> tuple[str, str, str, str, str] | None:
    """The grant that allows ``call`` (a named grant allows only its name), or None."""
    for key in (
        (call.namespace, call.group, call.resource, call.verb, ""),
        (call.namespace, call.group, call.resource, call.verb, call.name),
    ):
        if key in granted and (key[4] == "" or call.name):
            return key
    return None
