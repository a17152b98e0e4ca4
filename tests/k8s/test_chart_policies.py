"""What the chart's NetworkPolicies let through, read with NetworkPolicy semantics (no CNI runs here): a pod is
isolated in a direction once any policy selecting it names that direction, and then reaches, or is reached by, only
what some such policy's rules allow; a connection between pods needs the sender's egress and the receiver's ingress.
The evaluator below implements that for the selectors and peers the chart uses (matchLabels, matchExpressions,
namespaceSelector, ipBlock with except, ports), and its own test shows it refusing and allowing as it should."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.k8s import harness

SANDBOXES = "sandboxes"
CP = {"app.kubernetes.io/name": "sandbox", "app.kubernetes.io/instance": "sandbox"}
CP |= {"app.kubernetes.io/component": "control-plane"}
DNS_PORT = (53, "UDP")


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]
    ip: str
    ns_labels: dict[str, str] = field(default_factory=dict)

    def namespace_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": self.namespace, **self.ns_labels}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_ns: str, other: Pod | str) -> bool:
    if "ipBlock" in peer:
        ip = ipaddress.ip_address(other.ip if isinstance(other, Pod) else other)
        block = peer["ipBlock"]
        net = ipaddress.ip_network(block["cidr"])
        if ip.version != net.version or ip not in net:
            return False
        excepted = [ipaddress.ip_network(e) for e in block.get("except") or []]
        return not any(ip.version == e.version and ip in e for e in excepted)
    if not isinstance(other, Pod):
        return False  # pod and namespace selectors match pods only
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels()):
            return False
    elif other.namespace != policy_ns:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], other.labels)


def port_matches(rule: dict[str, Any], port: tuple[int, str]) -> bool:
    ports = rule.get("ports")
    return not ports or any(p.get("port") == port[0] and p.get("protocol", "TCP") == port[1] for p in ports)


def allowed(policies: list[dict[str, Any]], pod: Pod, direction: str, other: Pod | str, port: tuple[int, str]) -> bool:
    """Whether ``pod``'s policies let ``direction`` ("Ingress" from / "Egress" to) ``other`` on ``port``."""
    mine = [p for p in policies if p["metadata"]["namespace"] == pod.namespace]
    selecting = [p for p in mine if selects(p["spec"]["podSelector"], pod.labels)]
    isolating = [p for p in selecting if direction in p["spec"].get("policyTypes", ["Ingress"])]
    if not isolating:
        return True
    key, peers = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in isolating:
        for rule in policy["spec"].get(key) or []:
            if not port_matches(rule, port):
                continue
            if not rule.get(peers) or any(peer_matches(peer, pod.namespace, other) for peer in rule[peers]):
                return True
    return False


def connects(policies: list[dict[str, Any]], src: Pod, dst: Pod | str, port: tuple[int, str] = (443, "TCP")) -> bool:
    if not allowed(policies, src, "Egress", dst, port):
        return False
    return not isinstance(dst, Pod) or allowed(policies, dst, "Ingress", src, port)


def policies(*sets: str) -> list[dict[str, Any]]:
    return [d for d in harness.render_chart(sets=sets) if d["kind"] == "NetworkPolicy"]


def sandbox(network: str, ip: str, tenant: str = "a1b2c3d4e5f6") -> Pod:
    return Pod(SANDBOXES, {"sandbox.platform.io/network": network, "sandbox.platform.io/tenant": tenant}, ip)


CONTROL_PLANE = Pod("sandbox-system", CP, "10.1.0.5")
DNS = Pod("kube-system", {"k8s-app": "kube-dns"}, "10.1.0.10")
NONE, INTERNAL, EGRESS = sandbox("none", "10.2.0.1"), sandbox("internal", "10.2.0.2"), sandbox("egress", "10.2.0.3")
BLOCKED = [
    "10.9.9.9",
    "172.20.0.1",
    "192.168.1.1",
    "100.64.0.10",
    "169.254.169.254",
    "169.254.1.1",
    "fd00:ec2::254",
    "fc00::1",
    "fe80::1",
]
OPEN = ["1.1.1.1", "8.8.8.8", "2606:4700::1111"]


def test_the_control_plane_reaches_every_sandbox_and_nothing_else_does() -> None:
    rendered = policies()
    for pod in (NONE, INTERNAL, EGRESS):
        assert connects(rendered, CONTROL_PLANE, pod, (7000, "TCP")), pod.labels
        stranger = Pod("default", {"app": "web"}, "10.3.0.1")
        assert not connects(rendered, stranger, pod, (7000, "TCP"))
        for peer in (NONE, INTERNAL, EGRESS):
            if peer is not pod:
                assert not connects(rendered, peer, pod, (7000, "TCP")), (peer.labels, pod.labels)
    # a pod without the label in the sandbox namespace is shut off by the default deny alone
    unlabelled = Pod(SANDBOXES, {"app": "debug"}, "10.2.0.9")
    assert not connects(rendered, CONTROL_PLANE, unlabelled) and not connects(rendered, unlabelled, "1.1.1.1")


def test_network_none_reaches_nothing_not_even_dns() -> None:
    rendered = policies()
    for target in [*OPEN, *BLOCKED]:
        assert not connects(rendered, NONE, target)
    assert not connects(rendered, NONE, DNS, DNS_PORT)
    assert not connects(rendered, NONE, CONTROL_PLANE, (8080, "TCP"))


def test_network_egress_reaches_the_internet_but_no_denied_range() -> None:
    rendered = policies()
    for target in OPEN:
        assert connects(rendered, EGRESS, target), target
    for target in BLOCKED:
        assert not connects(rendered, EGRESS, target), target
    assert connects(rendered, EGRESS, DNS, DNS_PORT) and connects(rendered, EGRESS, DNS, (53, "TCP"))
    assert not connects(rendered, EGRESS, DNS, (8080, "TCP"))
    assert not connects(rendered, EGRESS, CONTROL_PLANE, (8080, "TCP")), "the control plane is in 10.0.0.0/8"


def test_network_internal_reaches_only_what_the_backends_per_tenant_policy_opens() -> None:
    """The chart alone opens nothing for internal sandboxes; with a per-tenant policy as the backend adds one (its
    shape here is an example), a tenant's internal sandboxes reach each other and no other tenant's."""
    rendered = policies()
    mate, other = sandbox("internal", "10.2.0.4"), sandbox("internal", "10.2.0.5", tenant="0f0f0f0f0f0f")
    assert not connects(rendered, INTERNAL, mate, (8000, "TCP"))
    assert not connects(rendered, INTERNAL, "1.1.1.1") and not connects(rendered, INTERNAL, DNS, DNS_PORT)
    tenant = {"sandbox.platform.io/network": "internal", "sandbox.platform.io/tenant": "a1b2c3d4e5f6"}
    per_tenant = {
        "metadata": {"name": "internal-a1b2c3d4e5f6", "namespace": SANDBOXES},
        "spec": {
            "podSelector": {"matchLabels": tenant},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"podSelector": {"matchLabels": tenant}}]}],
            "egress": [{"to": [{"podSelector": {"matchLabels": tenant}}]}],
        },
    }
    with_tenant = [*rendered, per_tenant]
    assert connects(with_tenant, INTERNAL, mate, (8000, "TCP"))
    assert not connects(with_tenant, INTERNAL, other, (8000, "TCP")) and not connects(with_tenant, other, INTERNAL)
    assert not connects(with_tenant, INTERNAL, "1.1.1.1") and not connects(with_tenant, EGRESS, INTERNAL)


def test_denied_cidrs_and_the_switches_are_honoured() -> None:
    rendered = policies("sandboxes.networkPolicy.egress.deniedCIDRs={169.254.0.0/16,203.0.113.0/24}")
    assert connects(rendered, EGRESS, "10.9.9.9"), "10.0.0.0/8 is no longer denied"
    assert not connects(rendered, EGRESS, "203.0.113.7") and not connects(rendered, EGRESS, "169.254.169.254")
    assert connects(rendered, EGRESS, "fd00:ec2::254"), "no IPv6 range denied"
    no_v6 = policies("sandboxes.networkPolicy.egress.ipv6=false")
    assert connects(no_v6, EGRESS, "1.1.1.1") and not connects(no_v6, EGRESS, "2606:4700::1111")
    no_dns = policies("sandboxes.networkPolicy.egress.dns.enabled=false")
    assert not connects(no_dns, EGRESS, DNS, DNS_PORT)
    off = policies("sandboxes.networkPolicy.enabled=false")
    assert connects(off, NONE, "169.254.169.254") and connects(off, INTERNAL, EGRESS), "no policy: nothing enforced"


@pytest.mark.parametrize(
    ("peer", "other", "want"),
    [
        ({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}, "10.1.1.1", False),
        ({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}, "11.1.1.1", True),
        ({"ipBlock": {"cidr": "0.0.0.0/0"}}, "2001:db8::1", False),
        ({"ipBlock": {"cidr": "::/0", "except": ["fc00::/7"]}}, "fd00::1", False),
        ({"ipBlock": {"cidr": "::/0", "except": ["fc00::/7"]}}, "2001:db8::1", True),
        ({"podSelector": {"matchLabels": {"a": "1"}}}, Pod("ns", {"a": "1"}, "10.0.0.1"), True),
        ({"podSelector": {"matchLabels": {"a": "1"}}}, Pod("other", {"a": "1"}, "10.0.0.1"), False),
        ({"podSelector": {"matchLabels": {"a": "1"}}}, "10.0.0.1", False),
        (
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "other"}}},
            Pod("other", {}, "10.0.0.1"),
            True,
        ),
    ],
)
def test_the_evaluator_reads_peers_as_kubernetes_does(peer: dict[str, Any], other: Pod | str, want: bool) -> None:
    assert peer_matches(peer, "ns", other) is want
