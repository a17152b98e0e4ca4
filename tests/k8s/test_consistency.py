"""The chart and the kustomize trees agree, their objects refer to each other correctly, the copies that must be
copies are identical, and server.json is what the server's own settings models accept."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import pydantic
import pytest
import yaml

from tests.k8s import harness

Docs = tuple[dict[str, Any], ...]


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


# --- chart (default values) vs kustomize base --------------------------------------------------------------------

ONLY_IN_CHART = {
    # the generated admin token: kustomize users create the Secret themselves (deploy/kustomize/base/kustomization.yaml)
    ("Secret", "sandbox-system", "sandbox-tokens"),
}
ONLY_IN_BASE = {
    # Helm installs into an existing namespace (or --create-namespace); the base brings its own
    ("Namespace", "", "sandbox-system"),
}


def chart_objects() -> dict[tuple[str, str, str], dict[str, Any]]:
    docs = [d for d in harness.render("chart") if not harness.is_hook(d)]
    return {key(d): harness.normalized(d) for d in docs}


def base_objects() -> dict[tuple[str, str, str], dict[str, Any]]:
    return {key(d): harness.normalized(d) for d in harness.unhash_names(harness.render("base"))}


def test_chart_and_base_have_the_same_objects() -> None:
    chart, base = chart_objects(), base_objects()
    assert set(chart) - ONLY_IN_CHART == set(base) - ONLY_IN_BASE, {
        "only in the chart": sorted(set(chart) - set(base) - ONLY_IN_CHART),
        "only in the base": sorted(set(base) - set(chart) - ONLY_IN_BASE),
    }
    assert set(chart) >= ONLY_IN_CHART and set(base) >= ONLY_IN_BASE


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'missing in chart' if k not in a else 'missing in base'}")
            else:
                out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: chart {_short(a)} != base {_short(b)}"]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:150] + f"... ({len(text)} characters)"


def test_chart_and_base_objects_are_equal() -> None:
    """Whole objects, not a sample of fields: images, args, env, probes, ports, security contexts, volumes, RBAC rules,
    network policies, server.json (as JSON), the dashboard, labels. Only the tool's own labels (helm.sh/chart,
    app.kubernetes.io/managed-by), Helm's checksum and resource-policy annotations and kustomize's name hashes are
    set aside."""
    chart, base = chart_objects(), base_objects()
    problems = []
    for k in sorted(set(chart) & set(base)):
        problems += [f"{'/'.join(k)}{d}" for d in _diff(chart[k], base[k])]
    assert not problems, "\n".join(problems)


def test_the_comparison_sees_differences() -> None:
    """A change of one container arg in the chart's render would be reported."""
    chart, base = chart_objects(), base_objects()
    k = ("Deployment", "sandbox-system", "sandbox")
    chart[k]["spec"]["template"]["spec"]["containers"][0]["args"][1] = "--host=127.0.0.1"
    assert _diff(chart[k], base[k]) == [
        ".spec.template.spec.containers[0].args[1]: chart '--host=127.0.0.1' != base '--host=0.0.0.0'"
    ]


# --- wiring: references between objects ---------------------------------------------------------------------------

# Secrets a render refers to but does not contain: the operator makes them (see the comments where they are used).
EXTERNAL_SECRETS = {
    "chart:external-redis.yaml": {"sandbox-tokens", "sandbox-redis-url"},
    "chart:gvisor.yaml": {"sandbox-redis-password"},
    "base": {"sandbox-tokens"},
    "overlay-example": {"sandbox-tokens"},
}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pod_templates(docs: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(d, d["spec"]["template"]) for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


@pytest.mark.parametrize("render", harness.RENDERS)
def test_wiring(render: str) -> None:
    # the uninstall hook's objects (its own ServiceAccount, Roles, Job) are checked in test_chart_uninstall.py
    docs = [d for d in harness.unhash_names(harness.render(render)) if not harness.is_hook(d)]
    index = {key(d): d for d in docs}
    names = defaultdict(set)
    for kind, ns, name in index:
        names[(kind, ns)].add(name)
    problems: list[str] = []

    def need(kind: str, ns: str, name: str, why: str) -> None:
        if name not in names[(kind, ns)]:
            problems.append(f"{why}: no {kind} {ns}/{name}")

    (control_plane,) = [d for d in docs if d["kind"] == "Deployment"]
    cp_ns = control_plane["metadata"]["namespace"]
    cp_labels = control_plane["spec"]["template"]["metadata"]["labels"]
    cp_spec = control_plane["spec"]["template"]["spec"]
    (server_cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "server.json" in d.get("data", {})]
    sandbox_ns = json.loads(server_cm["data"]["server.json"])["backend"]["namespace"]
    assert sandbox_ns != cp_ns

    # Deployments, StatefulSets: selectors, service accounts, config maps and secrets they mount or read
    for owner, template in pod_templates(docs):
        ns, spec, where = owner["metadata"]["namespace"], template["spec"], harness.kn(owner)
        if not _matches(owner["spec"]["selector"]["matchLabels"], template["metadata"]["labels"]):
            problems.append(f"{where}: selector does not match its pod template")
        if spec.get("serviceAccountName"):
            need("ServiceAccount", ns, spec["serviceAccountName"], where)
        for volume in spec.get("volumes", []):
            sources = volume.get("projected", {}).get("sources", [volume])
            for source in sources:
                if "configMap" in source:
                    need("ConfigMap", ns, source["configMap"]["name"], f"{where} volume {volume['name']}")
                if "secret" in source:
                    name = source["secret"].get("name") or source["secret"].get("secretName")
                    if name not in EXTERNAL_SECRETS.get(render, set()):
                        need("Secret", ns, name, f"{where} volume {volume['name']}")
        for c in spec["containers"]:
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref and ref["name"] not in EXTERNAL_SECRETS.get(render, set()):
                    need("Secret", ns, ref["name"], f"{where} env {env['name']}")
        if owner["kind"] == "StatefulSet":
            need("Service", ns, owner["spec"]["serviceName"], where)
            headless = index.get(("Service", ns, owner["spec"]["serviceName"]))
            if headless and headless["spec"].get("clusterIP") != "None":
                problems.append(f"{where}: serviceName {owner['spec']['serviceName']} is not headless")

    # the control plane's files: every path its flags name is mounted
    container = cp_spec["containers"][0]
    mounted = set()
    for mount in container["volumeMounts"]:
        (volume,) = [v for v in cp_spec["volumes"] if v["name"] == mount["name"]]
        for source in volume.get("projected", {}).get("sources", []):
            for item in next(iter(source.values())).get("items", []):
                mounted.add(f"{mount['mountPath']}/{item['path']}")
    for flag in ("--config=", "--tokens-file="):
        (path,) = [a.removeprefix(flag) for a in container["args"] if a.startswith(flag)]
        if path not in mounted:
            problems.append(f"{flag}{path} is not mounted (mounted: {sorted(mounted)})")

    # snapshot archives: server.json's snapshot_dir is a writable volume of the control plane (its root file system
    # is read-only), a claim of this render shared by the replicas, or an emptyDir (the chart's enabled=false)
    snapshot_dir = json.loads(server_cm["data"]["server.json"])["backend"].get("snapshot_dir")
    snapshot_mounts = [m for m in container["volumeMounts"] if m["mountPath"] == snapshot_dir]
    if not snapshot_dir or len(snapshot_mounts) != 1 or snapshot_mounts[0].get("readOnly"):
        problems.append(f"snapshot_dir {snapshot_dir!r} is not one writable volume mount of the control plane")
    else:
        (volume,) = [v for v in cp_spec["volumes"] if v["name"] == snapshot_mounts[0]["name"]]
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim:
            need("PersistentVolumeClaim", cp_ns, claim, f"snapshot volume {volume['name']}")
            pvc = index.get(("PersistentVolumeClaim", cp_ns, claim))
            shared = pvc is not None and "ReadWriteMany" in pvc["spec"]["accessModes"]
            if pvc and not shared and control_plane["spec"]["strategy"]["type"] != "Recreate":
                problems.append(f"snapshot claim {claim} is not ReadWriteMany: a rolling update would hang")
            if pvc and not shared and control_plane["spec"].get("replicas", 1) > 1:
                problems.append(f"snapshot claim {claim} is not ReadWriteMany but {cp_ns} runs several replicas")
        elif "emptyDir" not in volume:
            problems.append(f"snapshot volume {volume['name']} is neither a claim nor an emptyDir: {volume}")

    # Redis: the URL's host is the Redis Service, next to the control plane
    env = {e["name"]: e for e in container["env"]}
    url = env["SANDBOX_REDIS_URL"].get("value")
    if url:
        parsed = urlparse(url)
        need("Service", cp_ns, parsed.hostname or "", "SANDBOX_REDIS_URL")
        service = index.get(("Service", cp_ns, parsed.hostname or ""))
        if service and parsed.port not in [p["port"] for p in service["spec"]["ports"]]:
            problems.append(f"SANDBOX_REDIS_URL port {parsed.port} is not a port of Service {parsed.hostname}")

    # Services select pods and name their ports
    for svc in (d for d in docs if d["kind"] == "Service"):
        ns, where = svc["metadata"]["namespace"], harness.kn(svc)
        pods = [t for o, t in pod_templates(docs) if o["metadata"]["namespace"] == ns]
        selected = [t for t in pods if _matches(svc["spec"]["selector"], t["metadata"]["labels"])]
        if not selected:
            problems.append(f"{where}: selects no pods")
            continue
        port_names = {p["name"] for t in selected for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            if isinstance(port["targetPort"], str) and port["targetPort"] not in port_names:
                problems.append(f"{where}: targetPort {port['targetPort']} is not a container port")

    # RBAC: the Role lives where the sandboxes are and is bound to the control plane's ServiceAccount
    for rb in (d for d in docs if d["kind"] == "RoleBinding"):
        ns = rb["metadata"]["namespace"]
        if ns != sandbox_ns:
            problems.append(f"{harness.kn(rb)} is not in the sandbox namespace {sandbox_ns}")
        need(rb["roleRef"]["kind"], ns, rb["roleRef"]["name"], harness.kn(rb))
        for subject in rb["subjects"]:
            need("ServiceAccount", subject["namespace"], subject["name"], f"{harness.kn(rb)} subject")
            if (subject["namespace"], subject["name"]) != (cp_ns, cp_spec["serviceAccountName"]):
                problems.append(f"{harness.kn(rb)} binds {subject}, not the control plane's ServiceAccount")
    need("Namespace", "", sandbox_ns, "the sandbox namespace")

    # NetworkPolicies: sandboxes admit the control plane's pods from the control plane's namespace
    for np in (d for d in docs if d["kind"] == "NetworkPolicy"):
        if not np["metadata"]["name"].endswith("-from-control-plane"):
            continue
        if np["metadata"]["namespace"] != sandbox_ns:
            problems.append(f"{harness.kn(np)} is not in the sandbox namespace")
        (peer,) = np["spec"]["ingress"][0]["from"]
        if peer["namespaceSelector"]["matchLabels"] != {"kubernetes.io/metadata.name": cp_ns}:
            problems.append(f"{harness.kn(np)} admits namespace {peer['namespaceSelector']}, not {cp_ns}")
        if not _matches(peer["podSelector"]["matchLabels"], cp_labels):
            problems.append(f"{harness.kn(np)} does not admit the control plane's pods")
    redis_np = index.get(("NetworkPolicy", cp_ns, "sandbox-redis"))
    if redis_np:
        (peer,) = redis_np["spec"]["ingress"][0]["from"]
        if not _matches(peer["podSelector"]["matchLabels"], cp_labels):
            problems.append("the Redis NetworkPolicy does not admit the control plane's pods")

    # PodDisruptionBudget, ServiceMonitor, Ingress
    for pdb in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        if not _matches(pdb["spec"]["selector"]["matchLabels"], cp_labels):
            problems.append(f"{harness.kn(pdb)} selects no control-plane pods")
    for sm in (d for d in docs if d["kind"] == "ServiceMonitor"):
        services = [
            s
            for s in docs
            if s["kind"] == "Service"
            and s["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
            and _matches(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        if [s["metadata"]["name"] for s in services] != ["sandbox-http"]:
            problems.append(f"{harness.kn(sm)} selects {[s['metadata']['name'] for s in services]}, not sandbox-http")
        for endpoint in sm["spec"]["endpoints"]:
            if services and endpoint["port"] not in [p["name"] for p in services[0]["spec"]["ports"]]:
                problems.append(f"{harness.kn(sm)}: port {endpoint['port']} is not a port of the Service")
    for ing in (d for d in docs if d["kind"] == "Ingress"):
        ns = ing["metadata"]["namespace"]
        for rule in ing["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                need("Service", ns, backend["name"], harness.kn(ing))
                target = index.get(("Service", ns, backend["name"]))
                if target and backend["port"]["name"] not in [p["name"] for p in target["spec"]["ports"]]:
                    problems.append(f"{harness.kn(ing)}: port {backend['port']['name']} not in {backend['name']}")

    assert not problems, "\n".join(problems)


def test_overlay_moves_both_namespaces_and_pins_the_image() -> None:
    docs = harness.render("overlay-example")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["metadata"]["namespace"] == "agents-platform"
    assert deployment["spec"]["replicas"] == 3
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.internal:5000/sandbox/controlplane:0.1.0"
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert namespaces == {"agents-platform", "agents-sandboxes"}
    assert not {d["metadata"].get("namespace") for d in docs} & {"sandbox-system", "sandboxes"}


# --- copies and single sources ------------------------------------------------------------------------------------


def test_dashboard_copy_is_identical() -> None:
    """helm reads files inside the chart only: the chart carries a copy of deploy/grafana/sandbox-dashboard.json.
    Refresh it with: cp deploy/grafana/sandbox-dashboard.json deploy/helm/sandbox/dashboards/"""
    source = harness.ROOT / "deploy" / "grafana" / "sandbox-dashboard.json"
    copy = harness.CHART / "dashboards" / "sandbox-dashboard.json"
    assert copy.read_bytes() == source.read_bytes(), "the chart's dashboard copy is stale; see this test's docstring"
    for render in ("chart", "base"):
        (cm,) = [
            d
            for d in harness.render(render)
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "sandbox-dashboard"
        ]
        assert json.loads(cm["data"]["sandbox-dashboard.json"]) == json.loads(source.read_text())


def test_crds_have_one_source() -> None:
    """The chart's crds/ is the only copy: its kustomization lists every CRD file, and the kustomize trees render
    exactly those objects."""
    listed = yaml.safe_load((harness.CRD_DIR / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(p.name for p in harness.CRD_FILES)
    files = {
        yaml.safe_load(p.read_text())["metadata"]["name"]: yaml.safe_load(p.read_text()) for p in harness.CRD_FILES
    }
    assert not list((harness.ROOT / "deploy").glob("crds")), "no second copy of the CRDs outside the chart"
    for render in harness.RENDERS:
        rendered = {d["metadata"]["name"]: d for d in harness.render(render) if d["kind"] == "CustomResourceDefinition"}
        assert rendered == files, render
    stray = [
        p
        for p in harness.KUSTOMIZE.rglob("*.yaml")
        if "CustomResourceDefinition" in p.read_text() and p.name != "kustomization.yaml"
    ]
    assert not stray, stray


# --- server.json against the server's own models -------------------------------------------------------------------


def server_config(render: str) -> dict[str, Any]:
    (cm,) = [d for d in harness.render(render) if d["kind"] == "ConfigMap" and "server.json" in d.get("data", {})]
    return json.loads(cm["data"]["server.json"])


@pytest.mark.parametrize("render", harness.RENDERS)
def test_server_config_pools_and_lifecycle_are_valid_settings(render: str) -> None:
    from sandbox.service.lifecycle import LifecycleSettings
    from sandbox.service.pools import PoolConfig

    config = server_config(render)
    assert set(config) == {"backend", "pools", "lifecycle"}
    for pool in config["pools"]:
        PoolConfig.model_validate(pool)
    LifecycleSettings.model_validate(config["lifecycle"])


@pytest.mark.parametrize("render", harness.RENDERS)
def test_server_config_is_valid_server_settings(render: str) -> None:
    """The whole server.json, backend included, through ServerSettings, once the server has a Kubernetes backend
    config to check it against; until then this reports a skip, not a pass."""
    from sandbox.server import ServerSettings

    config = server_config(render)
    try:
        ServerSettings.model_validate(config)
    except pydantic.ValidationError as e:
        errors = e.errors()
        backend_type_unknown = any(err["loc"][:2] == ("backend", "type") for err in errors) or any(
            err["type"] == "union_tag_invalid" and err["loc"][:1] == ("backend",) for err in errors
        )
        if backend_type_unknown:
            pytest.skip("the server has no 'kubernetes' backend config yet: only pools and lifecycle were checked")
        raise
