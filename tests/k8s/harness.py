"""Offline checks of the Kubernetes artifacts: the real helm and kubectl binaries (scripts/k8s_tools.sh), renders of
the chart and of the kustomize trees, and schema validation with kubernetes-validate and jsonschema.

No API server is involved anywhere: what passes here is what a cluster's schema would accept, not proof that the
objects work together on a cluster (the wiring checks in test_consistency.py go a step further by hand).
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "sandbox"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
CRD_DIR = CHART / "crds"
CRD_FILES = sorted(p for p in CRD_DIR.glob("*.yaml") if p.name != "kustomization.yaml")
KUSTOMIZE = ROOT / "deploy" / "kustomize"
KUSTOMIZE_TREES = {"base": KUSTOMIZE / "base", "overlay-example": KUSTOMIZE / "overlays" / "example"}
TOOLS_DIR = ROOT / ".cache" / "k8s-tools"
HELM = TOOLS_DIR / "helm"
KUBECTL = TOOLS_DIR / "kubectl"

RELEASE = "sandbox"
RELEASE_NAMESPACE = "sandbox-system"

# The Kubernetes minor versions the chart and the manifests claim (Chart.yaml: kubeVersion >=1.29): every one that
# kubernetes-validate ships schemas for from 1.29 on.
K8S_VERSIONS = tuple(
    v
    for v in dict.fromkeys(kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions())
    if tuple(map(int, v.split("."))) >= (1, 29)
)

CUSTOM_GROUPS = {"sandbox.platform.io", "monitoring.coreos.com"}
"""API groups with no built-in schema: our CRDs' objects (validated against the CRDs) and the prometheus-operator's
ServiceMonitor (validated against SERVICE_MONITOR_SCHEMA)."""


class ToolError(AssertionError):
    pass


def run(cmd: list[str | Path], *, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise ToolError(f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def fetch_tools() -> str:
    """Runs scripts/k8s_tools.sh (idempotent: a no-op once the binaries run) and returns what it printed."""
    proc = run(["bash", ROOT / "scripts" / "k8s_tools.sh", TOOLS_DIR], check=False, timeout=600)
    if proc.returncode != 0 or not (HELM.is_file() and KUBECTL.is_file()):
        raise ToolError(f"scripts/k8s_tools.sh could not provide helm and kubectl:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def load_all(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def helm_args(values: tuple[str | Path, ...] = (), sets: tuple[str, ...] = ()) -> list[str | Path]:
    args: list[str | Path] = []
    for v in values:
        args += ["-f", v]
    for s in sets:
        args += ["--set", s]
    return args


@functools.cache
def render_chart(values: tuple[str | Path, ...] = (), sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], ...]:
    """`helm template` of the chart with its CRDs, as release "sandbox" in namespace "sandbox-system"."""
    out = run([HELM, "template", RELEASE, CHART, "-n", RELEASE_NAMESPACE, "--include-crds", *helm_args(values, sets)])
    return tuple(load_all(out.stdout))


@functools.cache
def render_kustomize(tree: str) -> tuple[dict[str, Any], ...]:
    return tuple(load_all(run([KUBECTL, "kustomize", KUSTOMIZE_TREES[tree]]).stdout))


def render(name: str) -> tuple[dict[str, Any], ...]:
    """A named render: "chart" (default values), "chart:<example>.yaml", "base" or "overlay-example"."""
    if name == "chart":
        return render_chart()
    if name.startswith("chart:"):
        return render_chart((CHART / "examples" / name.removeprefix("chart:"),))
    return render_kustomize(name)


RENDERS = ("chart", *(f"chart:{p.name}" for p in EXAMPLES), *KUSTOMIZE_TREES)


def is_hook(obj: dict[str, Any]) -> bool:
    """A Helm hook (the chart's pre-delete uninstall Job and its RBAC): not part of the installed release."""
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def kn(obj: dict[str, Any]) -> str:
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']}/{ns + '/' if ns else ''}{obj['metadata']['name']}"


def group_of(obj: dict[str, Any]) -> str:
    api = obj["apiVersion"]
    return api.split("/")[0] if "/" in api else ""


# kubernetes-validate reads its schema files (_definitions.json is 1.4 MB) on every call; they never change, so read
# each once. Only a speed-up: validate() itself is unchanged.
if not hasattr(kubernetes_validate.utils.schema_contents, "cache_info"):
    kubernetes_validate.utils.schema_contents = functools.cache(kubernetes_validate.utils.schema_contents)


def validate_builtin(obj: dict[str, Any], version: str) -> None:
    """kubernetes-validate --strict (unknown fields rejected) against one Kubernetes version. Unlike the CLI, which
    only warns about a kind it has no schema for, a missing schema is an error here."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise AssertionError(f"{kn(obj)} is invalid for Kubernetes {version} at {path or '<root>'}: {e.message}") from e
    except kubernetes_validate.SchemaNotFoundError as e:
        raise AssertionError(f"{kn(obj)}: no built-in schema ({e.message})") from e


# --- custom resources against their CRDs' openAPIV3Schema --------------------------------------------------------

# The keywords our CRD schemas may use: the subset of OpenAPI v3 that JSON Schema (jsonschema's validators) reads
# exactly as the API server does. `nullable`, boolean `exclusiveMinimum`, `x-kubernetes-int-or-string` ... would be
# read differently, so a schema that uses one fails test_crd_schemas_use_portable_keywords instead of passing here.
PORTABLE_KEYWORDS = {
    "type",
    "description",
    "properties",
    "required",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "items",
    "additionalProperties",
    "maxProperties",
    "minItems",
    "maxItems",
    "default",
    "x-kubernetes-validations",  # CEL: enforced by the API server only, not checked here
}


def schema_keywords(schema: dict[str, Any]) -> set[str]:
    found = set(schema)
    for sub in (schema.get("properties") or {}).values():
        found |= schema_keywords(sub)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found |= schema_keywords(schema[key])
    return found


def strict_jsonschema(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as JSON Schema that rejects unknown fields, as the API server does under
    `kubectl apply`'s default field validation (Strict), where it would otherwise prune them. An object with no
    `properties` (metadata) stays open; x-kubernetes-* keys are dropped."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if "properties" in out:
        out["properties"] = {k: strict_jsonschema(v) for k, v in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = strict_jsonschema(out[key])
    return out


@functools.cache
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> CRD version entry, from the chart's crds/."""
    found = {}
    for path in CRD_FILES:
        crd = yaml.safe_load(path.read_text())
        for version in crd["spec"]["versions"]:
            found[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = version
    return found


def _date_time(value: object) -> bool:
    """RFC 3339 date-time, as the API server checks `format: date-time` (jsonschema checks it only when the optional
    rfc3339-validator is installed)."""
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", value):
        return False
    try:
        datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks("date-time")(_date_time)


def validate_custom(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    if key == ("monitoring.coreos.com/v1", "ServiceMonitor"):
        schema = SERVICE_MONITOR_SCHEMA
    elif key in crds():
        schema = strict_jsonschema(crds()[key]["schema"]["openAPIV3Schema"])
    else:
        raise AssertionError(f"{kn(obj)}: no schema for {key}")
    validator = jsonschema.Draft7Validator(schema, format_checker=FORMATS)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        lines = [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
        raise AssertionError(f"{kn(obj)} does not match its schema:\n  " + "\n  ".join(lines))


def validate_any(obj: dict[str, Any], version: str) -> None:
    if group_of(obj) in CUSTOM_GROUPS:
        validate_custom(obj)
    else:
        validate_builtin(obj, version)


_STR = {"type": "string"}
_RELABEL = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "sourceLabels": {"type": "array", "items": _STR},
            "separator": _STR,
            "targetLabel": _STR,
            "regex": _STR,
            "modulus": {"type": "integer"},
            "replacement": _STR,
            "action": {
                "enum": [
                    "replace",
                    "Replace",
                    "keep",
                    "Keep",
                    "drop",
                    "Drop",
                    "hashmod",
                    "HashMod",
                    "labelmap",
                    "LabelMap",
                    "labeldrop",
                    "LabelDrop",
                    "labelkeep",
                    "LabelKeep",
                    "lowercase",
                    "Lowercase",
                    "uppercase",
                    "Uppercase",
                    "keepequal",
                    "KeepEqual",
                    "dropequal",
                    "DropEqual",
                ]
            },
        },
    },
}
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": _STR},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "$comment": "A hand-written subset of monitoring.coreos.com/v1 ServiceMonitor (prometheus-operator's CRD is not "
    "available offline): the fields the chart sets, with their types and enums from the operator's API reference; "
    "anything else is rejected.",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _STR,
                "namespace": _STR,
                "labels": {"type": "object", "additionalProperties": _STR},
                "annotations": {"type": "object", "additionalProperties": _STR},
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": _STR,
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"any": {"type": "boolean"}, "matchNames": {"type": "array", "items": _STR}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": _STR,
                            "targetPort": {"type": ["string", "integer"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                            "relabelings": _RELABEL,
                            "metricRelabelings": _RELABEL,
                        },
                    },
                },
            },
        },
    },
}


# --- comparing the chart with the kustomize base -----------------------------------------------------------------

HASH_SUFFIX = re.compile(r"^(?P<name>.+)-[a-z0-9]{10}$")


def unhash_names(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """kustomize's generated ConfigMaps carry a content hash in their name (sandbox-config-<hash>); drop it, in the
    objects and everywhere they are referred to."""
    renames = {}
    for d in docs:
        m = HASH_SUFFIX.match(d["metadata"]["name"])
        if d["kind"] == "ConfigMap" and m:
            renames[d["metadata"]["name"]] = m["name"]
    text = json.dumps(docs)
    for old, new in renames.items():
        text = text.replace(f'"{old}"', f'"{new}"')
    return json.loads(text)


TOOL_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
TOOL_ANNOTATIONS = ("helm.sh/resource-policy",)
"""Annotations only Helm reads (keep on uninstall): kubectl has no use for them."""


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    """An object minus what differs by tool only: the labels naming the tool, Helm's checksum annotations and the
    annotations only Helm reads. JSON files in ConfigMaps are compared as JSON."""
    obj = copy.deepcopy(obj)

    def strip(meta: dict[str, Any]) -> None:
        for label in TOOL_LABELS:
            (meta.get("labels") or {}).pop(label, None)
        annotations = meta.get("annotations") or {}
        for key in [k for k in annotations if k.startswith("checksum/") or k in TOOL_ANNOTATIONS]:
            del annotations[key]
        for key in ("labels", "annotations"):
            if key in meta and not meta[key]:
                del meta[key]

    strip(obj["metadata"])
    spec = obj.get("spec") or {}
    templates = [spec.get("template"), *(spec.get("volumeClaimTemplates") or [])]
    for template in templates:
        if isinstance(template, dict) and "metadata" in template:
            strip(template["metadata"])
    if obj["kind"] == "ConfigMap":
        for name, text in (obj.get("data") or {}).items():
            if name.endswith(".json"):
                obj["data"][name] = json.loads(text)
    return obj


def crd_docs() -> list[dict[str, Any]]:
    """The chart's CRDs, as `kubectl apply -f deploy/helm/sandbox/crds/` sends them."""
    return [yaml.safe_load(path.read_text()) for path in CRD_FILES]
