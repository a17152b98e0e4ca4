"""The API server's 403s told apart (sandbox/backends/kubernetes/errors.py), on the messages real clusters send.

The formats, from Kubernetes' own code:

- RBAC: ``<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>[/<sub>]" in API group
  "<group>" in the namespace "<ns>"`` (k8s.io/apiserver endpoints/handlers/responsewriters ``forbiddenMessage``,
  wrapped by apimachinery's ``NewForbidden``), or ``... at the cluster scope``;
- ResourceQuota: ``pods "<name>" is forbidden: exceeded quota: <quota>, requested: ..., used: ..., limited: ...``
  (plugin/pkg/admission/resourcequota), and ``failed quota: <quota>: must specify limits.cpu,...``;
- Pod Security admission: ``pods "<name>" is forbidden: violates PodSecurity "<level>:<version>": <check> (<detail>),
  ...`` (k8s.io/pod-security-admission admission ``violates PodSecurity %q: %s``);
- a validating webhook: ``admission webhook "<name>" denied the request: <its message>``.
"""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from sandbox.backends.kubernetes.errors import translate
from sandbox.errors import BackendError, CapacityExhausted, FailedPrecondition, SandboxError

SA = "system:serviceaccount:sandbox-system:sandbox"


def forbidden(message: str) -> ApiException:
    """A 403 as the API server sends it: a Status object with reason Forbidden."""
    error = ApiException(status=403, reason="Forbidden")
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}
    error.body = json.dumps({**status, "message": message})
    return error


def told(message: str, what: str = "create pod sbx-a") -> SandboxError:
    return translate(forbidden(message), what)


def test_rbac_names_the_verb_resource_and_points_at_the_chart_role() -> None:
    error = told(
        f'pods "sbx-a" is forbidden: User "{SA}" cannot create resource "pods" in API group "" in the namespace '
        '"sandboxes"'
    )
    assert type(error) is BackendError
    message = error.message
    assert message.startswith("create pod sbx-a: RBAC: ")
    assert f"({SA}) may not create pods (API group core) in the namespace sandboxes" in message
    assert "the chart's Role <release>-control-plane" in message and "sandbox-rbac.yaml" in message


def test_rbac_of_a_subresource_and_of_another_group() -> None:
    log = told(
        f'pods "sbx-a" is forbidden: User "{SA}" cannot get resource "pods/log" in API group "" in the namespace '
        '"sandboxes"',
        "logs of pod sbx-a",
    )
    assert "may not get pods/log (API group core)" in log.message
    policy = told(
        f'networkpolicies.networking.k8s.io is forbidden: User "{SA}" cannot create resource "networkpolicies" in '
        'API group "networking.k8s.io" in the namespace "sandboxes"',
        "create NetworkPolicy sbx-prod-internal-x",
    )
    assert type(policy) is BackendError
    assert "may not create networkpolicies (API group networking.k8s.io) in the namespace sandboxes" in policy.message
    cluster = told(f'nodes is forbidden: User "{SA}" cannot list resource "nodes" in API group "" at the cluster scope')
    assert "may not list nodes (API group core) at the cluster scope" in cluster.message


def test_a_used_up_quota_is_capacity_not_rbac() -> None:
    error = told(
        'pods "sbx-a" is forbidden: exceeded quota: sandbox-sandboxes, requested: requests.memory=8Gi, used: '
        "requests.memory=1020Gi, limited: requests.memory=1Ti"
    )
    assert type(error) is CapacityExhausted
    assert "ResourceQuota is used up" in error.message and "RBAC:" not in error.message
    assert "requested: requests.memory=8Gi" in error.message


def test_a_quota_the_pod_does_not_state_is_a_backend_error_not_rbac() -> None:
    error = told('pods "sbx-a" is forbidden: failed quota: sandbox-sandboxes: must specify limits.cpu,limits.memory')
    assert type(error) is BackendError
    assert "refuses the object as it is (not RBAC)" in error.message


def test_pod_security_names_the_policy_and_the_fields() -> None:
    error = told(
        'pods "sbx-a" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "sandbox" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "sandbox" must set securityContext.capabilities.drop=["ALL"]), seccompProfile (pod or container '
        '"sandbox" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
    )
    assert type(error) is FailedPrecondition
    message = error.message
    assert "Pod Security admission refuses the pod under policy 'restricted:latest'" in message
    fields = message.split("(the fields: ", 1)[1].split(")", 1)[0].split(", ")
    assert fields == [
        "securityContext.allowPrivilegeEscalation",
        "securityContext.capabilities.drop",
        "securityContext.seccompProfile.type",
    ]
    assert not message.startswith("create pod sbx-a: RBAC")


def test_pod_security_of_host_settings() -> None:
    error = told(
        'pods "sbx-a" is forbidden: violates PodSecurity "baseline:v1.29": host namespaces (hostNetwork=true), '
        'hostPath volumes (volume "data")'
    )
    assert type(error) is FailedPrecondition and "'baseline:v1.29'" in error.message
    assert "host namespaces (hostNetwork=true)" in error.message


def test_an_admission_webhook_is_named() -> None:
    error = told(
        'admission webhook "validation.gatekeeper.sh" denied the request: [must-have-owner] you must provide labels: '
        '{"owner"}'
    )
    assert type(error) is FailedPrecondition
    assert "admission webhook 'validation.gatekeeper.sh' refuses it" in error.message


@pytest.mark.parametrize("message", ["", "forbidden", "access denied by the cluster's own authorizer"])
def test_a_403_in_other_words_is_a_backend_error_that_does_not_claim_rbac(message: str) -> None:
    error = told(message)
    assert type(error) is BackendError
    assert "RBAC:" not in error.message and "neither RBAC, a quota, Pod Security nor a webhook" in error.message
