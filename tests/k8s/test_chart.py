"""The Helm chart: `helm lint --strict`, `helm template` with the default values and every example, what the renders
must contain (security settings, least-privilege RBAC, network policies), NOTES.txt and the packaged chart."""

from __future__ import annotations

import base64
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox import __version__
from sandbox.backends.kubernetes.config import KubernetesConfig
from tests.k8s import harness

VALUES = [pytest.param((), id="default"), *(pytest.param((p,), id=p.name) for p in harness.EXAMPLES)]
CHART_RENDERS = [r for r in harness.RENDERS if r.startswith("chart")]
STANDARD_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/part-of")


def test_examples_exist() -> None:
    names = {p.name for p in harness.EXAMPLES}
    assert {"external-redis.yaml", "gvisor.yaml", "ingress-and-monitoring.yaml"} <= names
    assert {"values-kind.yaml", "values-eks.yaml", "values-gke.yaml", "values-aks.yaml"} <= names


@pytest.mark.parametrize("values", VALUES)
def test_lint_strict(values: tuple[Path, ...]) -> None:
    proc = harness.run([harness.HELM, "lint", "--strict", harness.CHART, *harness.helm_args(values)], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def by_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[harness.kn(d) for d in found]}"
    return found[0]


def server_json(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    cms = [d for d in by_kind(docs, "ConfigMap") if "server.json" in d.get("data", {})]
    assert len(cms) == 1
    return json.loads(cms[0]["data"]["server.json"])


@pytest.mark.parametrize("render", CHART_RENDERS)
def test_template_renders_the_platform(render: str) -> None:
    docs = harness.render(render)
    kinds = {d["kind"] for d in docs}
    assert {
        "CustomResourceDefinition",
        "Deployment",
        "Service",
        "ConfigMap",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
        "Namespace",
    } <= kinds
    assert {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")} == {
        "sandboxes.sandbox.platform.io",
        "sandboxpools.sandbox.platform.io",
    }
    deployment = one(docs, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["sandbox"] and container["args"][0] == "server"
    args = container["args"]
    for flag in ("--host=0.0.0.0", "--config=/etc/sandbox/server.json", "--tokens-file=/etc/sandbox/tokens.json"):
        assert flag in args
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"grpc": 50051, "http": 8080}
    env = {e["name"]: e for e in container["env"]}
    assert "SANDBOX_REDIS_URL" in env
    assert server_json(docs)["backend"]["type"] == "kubernetes"
    services = {d["metadata"]["name"]: d for d in by_kind(docs, "Service")}
    assert {"sandbox-grpc", "sandbox-http"} <= set(services)
    for d in docs:
        if d["kind"] == "CustomResourceDefinition":
            continue
        labels = d["metadata"].get("labels", {})
        for label in (*STANDARD_LABELS, "app.kubernetes.io/managed-by", "app.kubernetes.io/component"):
            assert label in labels, f"{harness.kn(d)} lacks the label {label}"


def test_default_values_run_one_replica_on_read_write_once_storage_and_bundled_redis() -> None:
    """The defaults come up on a cluster whose only storage class is ReadWriteOnce (EKS gp3, GKE standard-rwo, AKS
    managed-csi): one replica, every claim ReadWriteOnce, no class named."""
    docs = harness.render("chart")
    assert one(docs, "Deployment")["spec"]["replicas"] == 1
    assert not by_kind(docs, "PodDisruptionBudget"), "one replica: a budget would block every node drain"
    for claim in [*by_kind(docs, "PersistentVolumeClaim"), *one(docs, "StatefulSet")["spec"]["volumeClaimTemplates"]]:
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"], claim["metadata"]["name"]
        assert "storageClassName" not in claim["spec"], "the cluster's default class"
    redis = one(docs, "StatefulSet", "sandbox-redis")
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi"
    conf = one(docs, "ConfigMap", "sandbox-redis")["data"]["redis.conf"]
    assert "appendonly yes" in conf.splitlines()
    env = {e["name"]: e for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SANDBOX_REDIS_URL"]["value"] == "redis://sandbox-redis:6379/0"
    tokens = one(docs, "Secret", "sandbox-tokens")
    assert set(tokens["data"]) == {"tokens.json"}
    dashboard = one(docs, "ConfigMap", "sandbox-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert not by_kind(docs, "Ingress") and not by_kind(docs, "ServiceMonitor")


def test_external_redis_example_has_no_bundled_redis_and_reads_secrets() -> None:
    docs = harness.render("chart:external-redis.yaml")
    assert not by_kind(docs, "StatefulSet")
    assert "sandbox-redis" not in {d["metadata"]["name"] for d in docs}
    assert not by_kind(docs, "Secret"), "tokens come from the existing Secret"
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["SANDBOX_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "sandbox-redis-url", "key": "url"}
    projected = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"]
    assert {"name": "sandbox-tokens", "items": [{"key": "tokens.json", "path": "tokens.json"}]} in [
        s.get("secret") for s in projected
    ]


def test_gvisor_example_puts_scheduling_into_the_backend_config() -> None:
    backend = server_json(harness.render("chart:gvisor.yaml"))["backend"]
    assert backend["runtime_class"] == "gvisor"
    assert backend["node_selector"] == {"sandbox.platform.io/sandboxes": "true"}
    assert backend["tolerations"][0]["key"] == "sandbox.platform.io/sandboxes"
    assert backend["priority_class"] == "sandbox-workloads"
    assert backend["images"]["desktop"] == "registry.example.internal:5000/sandbox/desktop:0.1.0"
    docs = harness.render("chart:gvisor.yaml")
    assert one(docs, "ResourceQuota")["metadata"]["namespace"] == "sandboxes"
    # the Redis password: required by redis-server, put into the control plane's Redis URL by the kubelet
    redis = one(docs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert redis["args"] == ["/etc/redis/redis.conf", "--requirepass", "$(REDIS_PASSWORD)"]
    env = [e["name"] for e in one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert env.index("REDIS_PASSWORD") < env.index("SANDBOX_REDIS_URL"), "$(VAR) only expands earlier variables"
    url = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"][env.index("SANDBOX_REDIS_URL")]
    assert url["value"] == "redis://:$(REDIS_PASSWORD)@sandbox-redis:6379/0"


def test_ingress_and_monitoring_example() -> None:
    docs = harness.render("chart:ingress-and-monitoring.yaml")
    ingresses = {d["metadata"]["name"]: d for d in by_kind(docs, "Ingress")}
    assert set(ingresses) == {"sandbox", "sandbox-grpc"}
    assert (
        ingresses["sandbox-grpc"]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPC"
    )
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "http"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    tokens = json.loads(base64.b64decode(one(docs, "Secret", "sandbox-tokens")["data"]["tokens.json"]))
    assert tokens["ops-4e1b7c9d2a6f8305ba"] == {"tenant": "ops", "admin": True}
    (server,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"] == "sandbox"]
    args = server["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--public-url=https://sandbox.example.com" in args, "preview URLs name the Ingress's host"
    default = [d for d in by_kind(harness.render("chart"), "Deployment") if d["metadata"]["name"] == "sandbox"]
    assert not any(
        a.startswith("--public-url") for a in default[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    )


def pod_specs(docs: tuple[dict[str, Any], ...]) -> list[tuple[str, dict[str, Any]]]:
    specs = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            specs.append((harness.kn(d), d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            specs.append((harness.kn(d), d["spec"]))
    return specs


@pytest.mark.parametrize("render", harness.RENDERS)
def test_pods_are_locked_down(render: str) -> None:
    """Every pod of every render: non-root, seccomp RuntimeDefault, no privilege escalation, all capabilities dropped,
    a read-only root file system, a memory limit, nothing from the host."""
    specs = pod_specs(harness.render(render))
    assert specs
    for name, spec in specs:
        pod_sc = spec.get("securityContext", {})
        assert pod_sc.get("runAsNonRoot") is True, name
        assert pod_sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", name
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not spec.get(key), name
        assert not any("hostPath" in v for v in spec.get("volumes", [])), name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc.get("privileged") is not True, name
            assert c["resources"]["limits"]["memory"], name


@pytest.mark.parametrize("render", harness.RENDERS)
def test_rbac_is_namespaced_and_least_privilege(render: str) -> None:
    docs = harness.render(render)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = [d for d in docs if d["kind"] == "Role" and not harness.is_hook(d)]
    assert len(roles) == 1
    role = roles[0]
    sandbox_ns = server_json(docs)["backend"]["namespace"]
    assert role["metadata"]["namespace"] == sandbox_ns
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}  # fmt: skip
    allowed = {
        ("", "pods"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "pods/log"): {"get"},
        # never list or watch: that would read every agent's token in the namespace
        ("", "secrets"): {"get", "create", "patch", "delete"},
        ("", "persistentvolumeclaims"): {"get", "create"},
        ("", "events"): {"list"},
        ("networking.k8s.io", "networkpolicies"): {"create", "delete"},
        ("coordination.k8s.io", "leases"): {"get", "create", "update"},
        ("sandbox.platform.io", "sandboxes"): {"list", "watch", "create", "patch", "delete"},
        ("sandbox.platform.io", "sandboxes/status"): {"patch"},
        ("sandbox.platform.io", "sandboxpools"): {"list", "watch"},
        ("sandbox.platform.io", "sandboxpools/status"): {"patch"},
        ("sandbox.platform.io", "sandboxpools/scale"): {"get", "patch"},
    }
    too_much = sorted(f"{v} {g}/{r}" for g, r, v in granted if v not in allowed.get((g, r), set()))
    assert not too_much, f"the Role grants more than the control plane calls (tests/k8s/test_rbac_calls.py): {too_much}"
    assert ("sandbox.platform.io", "sandboxpools/scale", "patch") in granted
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
        assert not {"update", "deletecollection"} & set(rule["verbs"]) or rule["resources"] == ["leases"], rule


def egress_blocks(spec: dict[str, Any]) -> dict[str, list[str]]:
    """The egress policy's ipBlocks: cidr -> its except list."""
    return {b["ipBlock"]["cidr"]: b["ipBlock"].get("except", []) for b in spec["egress"][0]["to"]}


DENIED = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "fd00::/8", "fe80::/10")


def covered(network: str, ranges: list[str]) -> bool:
    net = ipaddress.ip_network(network)
    return any(net.version == r.version and net.subnet_of(r) for r in map(ipaddress.ip_network, ranges))  # type: ignore[arg-type]


@pytest.mark.parametrize("render", harness.RENDERS)
def test_sandbox_network_policies(render: str) -> None:
    """The baseline policies the chart owns, selecting on sandbox.platform.io/network only: default deny for every
    pod of the sandbox namespace; ingress from the control plane; egress sandboxes to the internet but the private,
    carrier-grade NAT and link-local ranges (the metadata address), IPv4 and IPv6; nothing for internal (the
    backend's per-tenant policies open it)."""
    docs = harness.render(render)
    sandbox_ns = server_json(docs)["backend"]["namespace"]
    policies = {d["metadata"]["name"]: d["spec"] for d in by_kind(docs, "NetworkPolicy")}
    deny = policies["sandbox-default-deny"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []}
    admit = policies["sandbox-from-control-plane"]
    assert admit["policyTypes"] == ["Ingress"]
    (rule,) = admit["ingress"]
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "control-plane"
    assert "ports" not in rule
    egress = policies["sandbox-egress"]
    assert egress["podSelector"] == {"matchLabels": {"sandbox.platform.io/network": "egress"}}
    blocks = egress_blocks(egress)
    for denied in DENIED:
        assert covered(denied, blocks["0.0.0.0/0"] + blocks["::/0"]), f"{denied} is not denied"
    assert not [n for n in policies if "internal" in n], "the chart renders no allow-all for internal sandboxes"
    for d in by_kind(docs, "NetworkPolicy"):
        selector = d["spec"]["podSelector"]
        keys = {*selector.get("matchLabels", {}), *(e["key"] for e in selector.get("matchExpressions", []))}
        if d["metadata"]["namespace"] == sandbox_ns:
            assert keys <= {"sandbox.platform.io/network"}, f"{harness.kn(d)} selects on {keys}"
        else:
            assert d["metadata"]["name"] == "sandbox-redis"


def test_network_policies_off_removes_every_sandbox_policy() -> None:
    docs = harness.render_chart(sets=("sandboxes.networkPolicy.enabled=false",))
    validate_all(docs)
    assert [d["metadata"]["name"] for d in by_kind(docs, "NetworkPolicy")] == ["sandbox-redis"]


def test_lane_clients_reach_the_agent_port_only(tmp_path: Path) -> None:
    """sandboxes.networkPolicy.laneClients (docs/lanes.md) renders one more policy: those peers, to the agent's port
    (the backend's) and no other; none by default; a peer with no selector is refused by the schema."""
    assert "sandbox-lane-clients" not in {
        d["metadata"]["name"] for d in by_kind(harness.render_chart(), "NetworkPolicy")
    }
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "rollouts"}}}
    values = tmp_path / "lanes.yaml"
    values.write_text(json.dumps({"sandboxes": {"networkPolicy": {"laneClients": [peer]}}}))
    docs = harness.render_chart(values=(values,))
    validate_all(docs)
    lanes = one(docs, "NetworkPolicy", "sandbox-lane-clients")
    assert lanes["metadata"]["namespace"] == server_json(docs)["backend"]["namespace"]
    (rule,) = lanes["spec"]["ingress"]
    assert rule["from"] == [peer]
    assert rule["ports"] == [{"protocol": "TCP", "port": KubernetesConfig().agent_port}]
    empty = tmp_path / "empty-peer.yaml"
    empty.write_text(json.dumps({"sandboxes": {"networkPolicy": {"laneClients": [{}]}}}))
    with pytest.raises(harness.ToolError, match="minProperties"):
        harness.render_chart(values=(empty,))


def test_denied_cidrs_are_rendered_as_given() -> None:
    """deniedCIDRs replace the defaults, IPv4 ones under 0.0.0.0/0 and IPv6 ones under ::/0; ipv6=false drops ::/0;
    DNS off drops the DNS rule; every render is valid for every Kubernetes version the chart claims."""
    values = "{10.0.0.0/8,169.254.169.254/32,203.0.113.0/24,fd00::/8}"
    docs = harness.render_chart(sets=(f"sandboxes.networkPolicy.egress.deniedCIDRs={values}",))
    validate_all(docs)
    egress = one(docs, "NetworkPolicy", "sandbox-egress")["spec"]
    assert egress_blocks(egress) == {
        "0.0.0.0/0": ["10.0.0.0/8", "169.254.169.254/32", "203.0.113.0/24"],
        "::/0": ["fd00::/8"],
    }
    assert egress["egress"][1]["ports"] == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    sets = ("sandboxes.networkPolicy.egress.ipv6=false", "sandboxes.networkPolicy.egress.dns.enabled=false")
    docs = harness.render_chart(sets=sets)
    validate_all(docs)
    egress = one(docs, "NetworkPolicy", "sandbox-egress")["spec"]
    assert list(egress_blocks(egress)) == ["0.0.0.0/0"] and len(egress["egress"]) == 1
    cmd: list[str | Path] = [harness.HELM, "template", harness.RELEASE, harness.CHART, "-n", harness.RELEASE_NAMESPACE]
    dropped = harness.run([*cmd, "--set", "sandboxes.networkPolicy.egress.deniedCIDRs={10.0.0.0/8}"], check=False)
    assert dropped.returncode != 0 and "deniedCIDRs" in dropped.stderr, "the metadata address must stay denied"


def test_notes_tell_how_to_reach_the_api_and_the_web_view() -> None:
    def notes(*values: Path) -> str:
        cmd: list[str | Path] = [harness.HELM, "install", harness.RELEASE, harness.CHART]
        out = harness.run(
            [*cmd, "-n", harness.RELEASE_NAMESPACE, "--dry-run=client", *harness.helm_args(values)]
        ).stdout
        return out[out.index("NOTES:") :]

    default = notes()
    assert "kubectl -n sandbox-system port-forward svc/sandbox-http 8080:8080" in default
    assert "port-forward svc/sandbox-grpc 50051:50051" in default
    assert "/view" in default and "get secret sandbox-tokens" in default
    ingress = notes(harness.CHART / "examples" / "ingress-and-monitoring.yaml")
    assert "https://sandbox.example.com/view" in ingress
    assert "grpc.sandbox.example.com" in ingress


def test_package_holds_the_chart_and_not_the_kustomize_files(tmp_path: Path) -> None:
    harness.run([harness.HELM, "package", harness.CHART, "-d", tmp_path])
    (archive,) = tmp_path.glob("sandbox-*.tgz")
    with tarfile.open(archive) as tar:
        names = {n.removeprefix("sandbox/") for n in tar.getnames()}
    assert {
        "Chart.yaml",
        "values.yaml",
        "values.schema.json",
        "templates/NOTES.txt",
        "crds/sandboxes.sandbox.platform.io.yaml",
        "crds/sandboxpools.sandbox.platform.io.yaml",
        "dashboards/sandbox-dashboard.json",
    } <= names
    assert not {n for n in names if n.endswith("kustomization.yaml") or n.startswith("examples/")}


def test_template_refuses_the_release_namespace_for_sandboxes() -> None:
    cmd: list[str | Path] = [harness.HELM, "template", "sb", harness.CHART, "-n", "sandbox-system"]
    proc = harness.run(
        [*cmd, "--set", "sandboxes.namespace.name=sandbox-system"],
        check=False,
    )
    assert proc.returncode != 0
    assert "must differ from the release namespace" in proc.stderr


# --- the snapshot archives' volume (the backend's snapshot_dir) ----------------------------------------------------


def snapshot_volume(docs: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The control plane's volume mounted at server.json's snapshot_dir, and that mount."""
    snapshot_dir = server_json(docs)["backend"]["snapshot_dir"]
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == snapshot_dir]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return volume, mount


def validate_all(docs: tuple[dict[str, Any], ...]) -> None:
    failures = []
    for version in harness.K8S_VERSIONS:
        for obj in docs:
            try:
                harness.validate_any(obj, version)
            except AssertionError as e:
                failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_snapshot_volume_by_default_is_a_read_write_once_claim_at_snapshot_dir() -> None:
    docs = harness.render("chart")
    pvc = one(docs, "PersistentVolumeClaim", "sandbox-snapshots")
    assert pvc["metadata"]["namespace"] == harness.RELEASE_NAMESPACE
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"], "what every cluster's default class offers"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert "storageClassName" not in pvc["spec"], "the cluster's default class"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert server_json(docs)["backend"]["snapshot_dir"] == "/var/lib/sandbox/snapshots"
    volume, mount = snapshot_volume(docs)
    assert volume["persistentVolumeClaim"] == {"claimName": "sandbox-snapshots"}
    assert not mount.get("readOnly")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}, "a surge pod could not attach the volume"


def test_snapshot_volume_settings_reach_the_claim_the_mount_and_server_json() -> None:
    sets = (
        "controlPlane.replicaCount=1",
        "controlPlane.snapshots.path=/data/archives",
        "controlPlane.snapshots.size=100Gi",
        "controlPlane.snapshots.storageClassName=fast-rwo",
        "controlPlane.snapshots.accessModes={ReadWriteOnce}",
        "controlPlane.snapshots.keepOnUninstall=false",
    )
    docs = harness.render_chart(sets=sets)
    validate_all(docs)
    pvc = one(docs, "PersistentVolumeClaim", "sandbox-snapshots")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["storageClassName"] == "fast-rwo"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert "annotations" not in pvc["metadata"]
    assert server_json(docs)["backend"]["snapshot_dir"] == "/data/archives"
    volume, mount = snapshot_volume(docs)
    assert mount["mountPath"] == "/data/archives"
    assert volume["persistentVolumeClaim"]["claimName"] == "sandbox-snapshots"
    # a ReadWriteOnce volume cannot attach beside the old pod on another node: no surge pod
    assert one(docs, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}


def test_snapshot_volume_from_an_existing_claim() -> None:
    docs = harness.render_chart(sets=("controlPlane.snapshots.existingClaim=team-archives",))
    validate_all(docs)
    assert not by_kind(docs, "PersistentVolumeClaim"), "the chart makes no claim of its own"
    volume, _ = snapshot_volume(docs)
    assert volume["persistentVolumeClaim"] == {"claimName": "team-archives"}
    assert server_json(docs)["backend"]["snapshot_dir"] == "/var/lib/sandbox/snapshots"


def test_snapshot_volume_disabled_is_an_emptydir_and_notes_warn() -> None:
    docs = harness.render_chart(sets=("controlPlane.snapshots.enabled=false", "controlPlane.replicaCount=2"))
    validate_all(docs)
    assert not by_kind(docs, "PersistentVolumeClaim")
    volume, _ = snapshot_volume(docs)
    assert volume["emptyDir"] == {"sizeLimit": "20Gi"}
    assert one(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    cmd: list[str | Path] = [harness.HELM, "install", harness.RELEASE, harness.CHART, "-n", harness.RELEASE_NAMESPACE]
    sets = ["--set", "controlPlane.snapshots.enabled=false", "--set", "controlPlane.replicaCount=2"]
    notes = harness.run([*cmd, "--dry-run=client", *sets]).stdout
    notes = " ".join(notes[notes.index("NOTES:") :].split())
    assert "snapshot archives live in an emptyDir, lost whenever a control-plane pod goes" in notes
    assert "each of the 2 replicas sees only its own" in notes
    # the minimal example (one replica, no persistence) uses it
    assert "emptyDir" in snapshot_volume(harness.render("chart:minimal-dev.yaml"))[0]


def test_snapshot_volume_read_write_once_pod_allows_one_replica_only() -> None:
    cmd: list[str | Path] = [harness.HELM, "template", harness.RELEASE, harness.CHART, "-n", harness.RELEASE_NAMESPACE]
    sets = ["--set", "controlPlane.snapshots.accessModes={ReadWriteOncePod}", "--set", "controlPlane.replicaCount=2"]
    proc = harness.run([*cmd, *sets], check=False)
    assert proc.returncode != 0
    assert "controlPlane.replicaCount must be 1" in proc.stderr
    docs = harness.render_chart(
        sets=("controlPlane.replicaCount=1", "controlPlane.snapshots.accessModes={ReadWriteOncePod}")
    )
    assert one(docs, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteOncePod"]
    assert one(docs, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize("modes", ["{ReadWriteOnce}", "{ReadWriteOnce,ReadWriteOncePod}"])
def test_two_replicas_without_a_read_write_many_snapshot_claim_fail_naming_the_value(modes: str) -> None:
    cmd: list[str | Path] = [harness.HELM, "template", harness.RELEASE, harness.CHART, "-n", harness.RELEASE_NAMESPACE]
    sets = ["--set", "controlPlane.replicaCount=2", "--set", f"controlPlane.snapshots.accessModes={modes}"]
    proc = harness.run([*cmd, *sets], check=False)
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())
    assert "controlPlane.replicaCount is 2" in message or "controlPlane.replicaCount must be 1" in message, message
    assert "controlPlane.snapshots.accessModes" in message
    # helm install refuses before it creates anything (helm 4's lint only logs a template's `fail` at INFO)
    install: list[str | Path] = [harness.HELM, "install", harness.RELEASE, harness.CHART]
    dry = harness.run([*install, "-n", harness.RELEASE_NAMESPACE, "--dry-run=client", *sets], check=False)
    assert dry.returncode != 0 and "ReadWriteMany" in dry.stderr
    # an existing ReadWriteMany claim, or an emptyDir, takes 2 replicas
    harness.render_chart(sets=("controlPlane.replicaCount=2", "controlPlane.snapshots.accessModes={ReadWriteMany}"))
    harness.render_chart(sets=("controlPlane.replicaCount=2", "controlPlane.snapshots.enabled=false"))


CLOUDS = {
    # example: (replicas, snapshot class and mode, Redis class, sandbox volumes' class and mode)
    "values-eks.yaml": (2, "efs-sc", "ReadWriteMany", "gp3", "efs-sc", "ReadWriteMany"),
    "values-gke.yaml": (2, "standard-rwx", "ReadWriteMany", "standard-rwo", "standard-rwx", "ReadWriteMany"),
    "values-aks.yaml": (2, "azurefile-csi", "ReadWriteMany", "managed-csi", "azurefile-csi", "ReadWriteMany"),
    "values-kind.yaml": (1, "standard", "ReadWriteOnce", "standard", "standard", "ReadWriteOnce"),
}


@pytest.mark.parametrize("example", sorted(CLOUDS))
def test_cloud_examples_name_each_clouds_storage_classes(example: str) -> None:
    replicas, snap_class, snap_mode, redis_class, volume_class, volume_mode = CLOUDS[example]
    docs = harness.render(f"chart:{example}")
    validate_all(docs)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"]["type"] == ("RollingUpdate" if snap_mode == "ReadWriteMany" else "Recreate")
    assert bool(by_kind(docs, "PodDisruptionBudget")) == (replicas > 1)
    snapshots = one(docs, "PersistentVolumeClaim", "sandbox-snapshots")["spec"]
    assert (snapshots["storageClassName"], snapshots["accessModes"]) == (snap_class, [snap_mode])
    (redis,) = one(docs, "StatefulSet")["spec"]["volumeClaimTemplates"]
    assert (redis["spec"]["storageClassName"], redis["spec"]["accessModes"]) == (redis_class, ["ReadWriteOnce"])
    backend = server_json(docs)["backend"]
    assert (backend["storage_class"], backend["volume_access_mode"]) == (volume_class, volume_mode)


def test_one_version_names_the_images_everywhere() -> None:
    """`sandbox images push` (make push) tags every image with sandbox.__version__; the chart's default tag is its
    appVersion; the kustomize trees spell the tag out. One version, or a fresh install pulls a tag nobody pushed."""
    chart = yaml.safe_load((harness.CHART / "Chart.yaml").read_text())
    project = tomllib.loads((harness.ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == chart["version"] == project == __version__
    for render in harness.RENDERS:
        docs = harness.render(render)
        refs = [c["image"] for _, spec in pod_specs(docs) for c in spec["containers"]]
        refs += list(server_json(docs)["backend"]["images"].values())
        ours = [r for r in refs if "/sandbox/" in f"/{r}"]
        assert ours, render
        for ref in ours:
            assert ref.endswith(f":{__version__}"), f"{render} names {ref}, not the pushed tag {__version__}"


def test_notes_say_who_enforces_the_policies_and_what_uninstall_does() -> None:
    def notes(*sets: str) -> str:
        cmd: list[str | Path] = [harness.HELM, "install", harness.RELEASE, harness.CHART]
        proc = harness.run([*cmd, "-n", harness.RELEASE_NAMESPACE, "--dry-run=client", *harness.helm_args((), sets)])
        out = proc.stdout
        return " ".join(out[out.index("NOTES:") :].split())

    default = notes()
    assert "only a CNI that enforces them" in default and "Job sandbox-uninstall" in default
    off = notes("sandboxes.networkPolicy.enabled=false", "uninstallHook.enabled=false")
    assert "WARNING: sandboxes.networkPolicy.enabled is false" in off and "sandbox-uninstall" not in off
