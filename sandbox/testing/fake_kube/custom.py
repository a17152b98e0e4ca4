"""Custom resources in the fake API server, as the real one serves them once their CustomResourceDefinition exists.

Creating a CRD (``apiextensions.k8s.io/v1``, cluster-scoped) serves its storage version at
``/apis/<group>/<version>/[namespaces/<ns>/]<plural>``; deleting it stops that and deletes its objects. What the
platform's clients rely on, kept as the API server does it:

- **status subresource** (``subresources.status``): a create drops ``status``; a write to the object keeps the old
  status whatever it sends; a write to ``/status`` changes the status only (everything else stays as it was);
- **metadata.generation**: 1 at creation, + 1 for each write that changes anything but metadata and status;
- **scale subresource** (``subresources.scale``): ``/scale`` reads and writes an ``autoscaling/v1`` Scale whose
  ``spec.replicas`` is the object's ``specReplicasPath`` and whose status comes from ``statusReplicasPath`` and
  ``labelSelectorPath`` (what ``kubectl scale`` uses);
- **defaults** of the schema (``default``) are filled in on every write, where the parent object is present;
- **server-side printing**: a GET asking for a Table (``kubectl get``) gets one built from the CRD's
  ``additionalPrinterColumns`` (``.a.b`` paths, and list filters as ``.status.conditions[?(@.type=="Ready")].reason``;
  a date column as the time since it);
- a **validator** (``ObjectStore.validate``, set by tests: the CRD's openAPIV3Schema with jsonschema) sees every
  object after each write; what it refuses is answered 422 Invalid, as the API server's schema check would.

Not kept: pruning of unknown fields (the validator refuses them instead, as ``kubectl --validate=strict`` does),
CEL rules (``x-kubernetes-validations``), conversion between versions (only the storage version is served).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sandbox.testing.fake_kube.rest import ApiError

CRD_RESOURCE = "customresourcedefinitions"
SCALE_API = "autoscaling/v1"
_SCALE_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


@dataclass(frozen=True)
class CustomKind:
    plural: str
    api_version: str
    """``<group>/<version>`` of the storage version."""
    kind: str
    namespaced: bool
    status: bool
    """Whether the status subresource is enabled."""
    scale: dict[str, str] | None
    """specReplicasPath, statusReplicasPath, labelSelectorPath when the scale subresource is enabled."""
    schema: dict[str, Any]
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[dict[str, Any], ...] = ()
    """additionalPrinterColumns: what ``kubectl get`` prints (server-side, as a Table)."""


def kind_of(crd: dict[str, Any]) -> CustomKind:
    """What a CRD serves (its storage version); 422 for a CRD the fake cannot serve."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = [v for v in spec.get("versions") or [] if v.get("storage")]
    name = str((crd.get("metadata") or {}).get("name", ""))
    if not spec.get("group") or not names.get("plural") or not names.get("kind") or len(versions) != 1:
        raise ApiError(422, "Invalid", f'CustomResourceDefinition "{name}" is invalid: group, names and one storage '
                       "version are required", name=name, kind=CRD_RESOURCE)  # fmt: skip
    if name != f"{names['plural']}.{spec['group']}":
        raise ApiError(422, "Invalid", f'CustomResourceDefinition "{name}" is invalid: metadata.name must be '
                       f"{names['plural']}.{spec['group']}", name=name, kind=CRD_RESOURCE)  # fmt: skip
    version = versions[0]
    subresources = version.get("subresources") or {}
    scale = subresources.get("scale")
    return CustomKind(
        plural=names["plural"],
        api_version=f"{spec['group']}/{version['name']}",
        kind=names["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        status="status" in subresources,
        scale=dict(scale) if isinstance(scale, dict) else None,
        schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
        singular=str(names.get("singular") or ""),
        short_names=tuple(names.get("shortNames") or ()),
        categories=tuple(names.get("categories") or ()),
        columns=tuple(version.get("additionalPrinterColumns") or ()),
    )


# ---------------------------------------------------------------------------------------------------- writes


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    """What ``metadata.generation`` follows: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def on_create(kind: CustomKind, obj: dict[str, Any]) -> None:
    if kind.status:
        obj.pop("status", None)
    obj["metadata"]["generation"] = 1
    apply_defaults(kind.schema, obj)


def on_update(kind: CustomKind, old: dict[str, Any], new: dict[str, Any]) -> None:
    """A write to the object itself (not a subresource)."""
    if kind.status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    apply_defaults(kind.schema, new)
    generation = int(old["metadata"].get("generation", 1))
    new["metadata"]["generation"] = generation + 1 if _body(new) != _body(old) else generation


def on_status_update(kind: CustomKind, old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A write to ``/status``: the old object with the new status (as the API server's status strategy does)."""
    if not kind.status:
        raise ApiError(404, "NotFound", f"{kind.plural} has no status subresource")
    result = copy.deepcopy(old)
    if "status" in new:
        result["status"] = copy.deepcopy(new["status"])
    else:
        result.pop("status", None)
    apply_defaults(kind.schema, result)
    return result


def apply_defaults(schema: dict[str, Any], value: Any) -> None:
    """Fill in the schema's ``default`` values, in place, wherever the enclosing object is present."""
    if not isinstance(value, dict):
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for item in value:
                apply_defaults(schema["items"], item)
        return
    for key, sub in (schema.get("properties") or {}).items():
        if key not in value and "default" in sub:
            value[key] = copy.deepcopy(sub["default"])
        if key in value:
            apply_defaults(sub, value[key])


# ---------------------------------------------------------------------------------------------------- kubectl get


def table(kind: CustomKind, objs: list[dict[str, Any]], version: str) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of the objects, with the CRD's printer columns (as the API server prints them for
    ``kubectl get``: a date column as the time since it; a missing value as null, which kubectl shows as <none>)."""
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name of the object", "priority": 0}]
    columns += [{"name": c["name"], "type": c["type"], "format": c.get("format", ""),
                 "description": c.get("description", ""), "priority": int(c.get("priority", 0))}
                for c in kind.columns]  # fmt: skip
    rows = []
    for obj in objs:
        cells: list[Any] = [obj["metadata"]["name"]]
        for column in kind.columns:
            value = read_path(obj, column["jsonPath"])
            cells.append(_age(value) if column["type"] == "date" and isinstance(value, str) else value)
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append({"cells": cells, "object": partial})
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": version},
            "columnDefinitions": columns, "rows": rows}  # fmt: skip


def _age(stamp: str) -> str:
    """The time since ``stamp``, as kubectl prints it (5s, 3m20s, 4h, 2d3h ...)."""
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    s = max(0, int((datetime.now(UTC) - then).total_seconds()))
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{d}d{h % 24}h" if d < 8 and h % 24 else f"{d}d"


# ---------------------------------------------------------------------------------------------------- scale


_STEP = re.compile(r"[^.\[]+(?:\[[^\]]*\])?")
_FILTER = re.compile(r"""^(.+)\[\?\(@\.(\w+)==["'](.*)["']\)\]$""")


def _path(json_path: str) -> list[str]:
    """``.spec.min`` -> ["spec", "min"] (the simple paths CRDs declare for the scale subresource); a step may end in
    a list filter: ``conditions[?(@.type=="Ready")]``."""
    return _STEP.findall(json_path.strip())


def read_path(obj: dict[str, Any], json_path: str) -> Any:
    node: Any = obj
    for part in _path(json_path):
        found = _FILTER.match(part)
        if not isinstance(node, dict):
            return None
        node = node.get(found.group(1) if found else part)
        if found:  # the first item of the list whose field equals the value, as kubectl's JSONPath prints it
            items = [i for i in node if isinstance(i, dict)] if isinstance(node, list) else []
            node = next((i for i in items if str(i.get(found.group(2))) == found.group(3)), None)
    return node


def write_path(obj: dict[str, Any], json_path: str, value: Any) -> None:
    *parents, last = _path(json_path)
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value


def scale_of(kind: CustomKind, obj: dict[str, Any]) -> dict[str, Any]:
    """The object's ``autoscaling/v1`` Scale."""
    scale = _require_scale(kind)
    meta = obj["metadata"]
    status: dict[str, Any] = {"replicas": int(read_path(obj, scale.get("statusReplicasPath", "")) or 0)}
    selector = read_path(obj, scale["labelSelectorPath"]) if scale.get("labelSelectorPath") else None
    if selector:
        status["selector"] = selector
    return {
        "kind": "Scale",
        "apiVersion": SCALE_API,
        "metadata": {k: meta[k] for k in _SCALE_META if k in meta},
        "spec": {"replicas": int(read_path(obj, scale["specReplicasPath"]) or 0)},
        "status": status,
    }


def scaled(kind: CustomKind, obj: dict[str, Any], scale: dict[str, Any]) -> dict[str, Any]:
    """The object with the replicas a Scale asks for written at ``specReplicasPath``."""
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        name = obj["metadata"]["name"]
        raise ApiError(422, "Invalid", f'Scale "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: '
                       "must be a non-negative integer", name=name, kind=kind.plural)  # fmt: skip
    result = copy.deepcopy(obj)
    write_path(result, _require_scale(kind)["specReplicasPath"], replicas)
    return result


def _require_scale(kind: CustomKind) -> dict[str, str]:
    if kind.scale is None or not kind.scale.get("specReplicasPath"):
        raise ApiError(404, "NotFound", f"{kind.plural} has no scale subresource")
    return kind.scale
