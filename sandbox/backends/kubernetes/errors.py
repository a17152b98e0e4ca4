"""The API server's answers, as the platform's exceptions: ONE table by status code (and the 403s told apart by the
server's words: ``FORBIDDEN``), read by :func:`translate`.

Every call to the API server goes through :func:`translate` (via ``api.KubeApi``), so kubernetes_asyncio's and
aiohttp's exceptions never leave the backend: each becomes a :mod:`sandbox.errors` class, raised ``from`` the
original. The message names what was being done and carries the API server's own ``Status.message``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException, OpenApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from sandbox.errors import (
    BackendError,
    CapacityExhausted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    SandboxError,
    Unavailable,
)

STATUS_TABLE: dict[int, tuple[type[SandboxError], str]] = {
    400: (InvalidArgument, "the API server rejected the request"),
    401: (
        BackendError,
        "RBAC: the API server did not accept the control plane's credentials (check its ServiceAccount token or "
        "the kubeconfig user)",
    ),
    403: (
        BackendError,
        "forbidden, in words that name neither RBAC, a quota, Pod Security nor a webhook (an authorizer or "
        "admission plugin of the cluster's own?); if RBAC, see the chart's Role",
    ),
    404: (NotFound, "not found"),
    409: (FailedPrecondition, "conflict: it exists already, or it changed meanwhile"),
    410: (Unavailable, "gone: the resourceVersion watched is too old; list again"),
    415: (InvalidArgument, "the API server does not take this content type"),
    422: (InvalidArgument, "the API server refused the object as invalid"),
    429: (Unavailable, "the API server is throttling this client; retry"),
}
"""HTTP status -> (exception class, what it means). Any other 5xx is Unavailable; any other status a BackendError."""

CHART_ROLE = "the chart's Role <release>-control-plane in the sandbox namespace (templates/sandbox-rbac.yaml)"

_RBAC = re.compile(
    r'User "(?P<user>[^"]*)" cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<namespace>[^"]+)"| at the cluster scope)?'
)
"""The RBAC authorizer's refusal (k8s.io/apiserver ``responsewriters.forbiddenMessage``), inside the API server's
``<resource> "<name>" is forbidden: ...``."""
_POD_SECURITY = re.compile(r'violates PodSecurity "(?P<policy>[^"]+)": (?P<violations>.*)')
"""Pod Security admission's refusal (k8s.io/pod-security-admission), e.g. ``pods "x" is forbidden: violates
PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "c" must set
securityContext.allowPrivilegeEscalation=false), ...``."""
_FIELD = re.compile(r"(?:spec\.|securityContext\.)[A-Za-z0-9_.\[\]*]+")
_WEBHOOK = re.compile(r'admission webhook "(?P<hook>[^"]+)" denied the request')


def _quota(detail: str, what: str) -> SandboxError | None:
    if "exceeded quota" in detail:
        return CapacityExhausted(
            f"{what}: the sandbox namespace's ResourceQuota is used up (a ceiling the API server enforces; not RBAC): "
            f"{detail}; end other sandboxes, raise the quota (the chart's sandboxes.resourceQuota.hard), or ask for "
            "fewer resources"
        )
    if "failed quota" in detail:
        return BackendError(
            f"{what}: a ResourceQuota of the sandbox namespace refuses the object as it is (not RBAC): {detail}; the "
            "quota limits a resource the object does not state"
        )
    return None


def _pod_security(detail: str, what: str) -> SandboxError | None:
    found = _POD_SECURITY.search(detail)
    if found is None:
        return None
    fields = sorted(set(_FIELD.findall(found["violations"])))
    named = f" (the fields: {', '.join(f.rstrip('.=') for f in fields)})" if fields else ""
    return FailedPrecondition(
        f"{what}: the sandbox namespace's Pod Security admission refuses the pod under policy "
        f"{found['policy']!r}{named}, not RBAC: {detail}; the backend's pods meet 'restricted' as built, so a setting "
        "added to them (runtime_class, android_kvm_group ...) or a stricter policy on the namespace "
        "(its pod-security.kubernetes.io/enforce label) is the cause"
    )


def _rbac(detail: str, what: str) -> SandboxError | None:
    found = _RBAC.search(detail)
    if found is None:
        return None
    group = found["group"] or ("core" if found["group"] is not None else "?")
    where = f" in the namespace {found['namespace']}" if found["namespace"] else ""
    if "at the cluster scope" in detail:
        where = " at the cluster scope"
    return BackendError(
        f"{what}: RBAC: forbidden: the control plane's identity ({found['user']}) may not {found['verb']} "
        f"{found['resource']} (API group {group}){where}; grant that verb on that resource in {CHART_ROLE}, or in "
        f"your own Role bound to its ServiceAccount: {detail}"
    )


def _webhook(detail: str, what: str) -> SandboxError | None:
    found = _WEBHOOK.search(detail)
    if found is None:
        return None
    return FailedPrecondition(
        f"{what}: the cluster's admission webhook {found['hook']!r} refuses it (a policy of the cluster, not RBAC): "
        f"{detail}"
    )


FORBIDDEN = (_quota, _pod_security, _webhook, _rbac)
"""The 403s told apart by the API server's words, in this order: a 403 is RBAC only when the RBAC authorizer's words
say so. What each means: a ResourceQuota used up (CapacityExhausted) or refusing an object that does not state what
it limits; Pod Security admission (FailedPrecondition naming the policy and the fields); a validating webhook
(Gatekeeper, Kyverno: FailedPrecondition naming it); RBAC (BackendError naming the verb and resource and pointing at
the chart's Role). Any other 403 is STATUS_TABLE's."""


def status_message(body: Any) -> str:
    """The ``message`` of a Kubernetes Status object in a response body (bytes, str or dict), or the body itself."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return body.strip()[:500]
    if isinstance(body, dict):
        return str(body.get("message") or body.get("reason") or "")[:2000]
    return ""


def for_status(status: int, body: Any, what: str) -> SandboxError:
    """The exception for an HTTP status with its response body."""
    cls, meaning = STATUS_TABLE.get(status, (Unavailable if status >= 500 else BackendError, f"HTTP {status}"))
    if status >= 500 and status not in STATUS_TABLE:
        meaning = f"the API server failed (HTTP {status}); retry"
    detail = status_message(body)
    if status == 403:
        for told in FORBIDDEN:
            if (error := told(detail, what)) is not None:
                return error
    return cls(f"{what}: {meaning}" + (f": {detail}" if detail else ""))


def translate(e: BaseException, what: str) -> SandboxError:
    """The platform's exception for anything the client library or its HTTP session raised."""
    if isinstance(e, SandboxError):
        return e
    if isinstance(e, ApiException):
        return for_status(int(e.status or 0), e.body, what)
    if isinstance(e, ConfigException):
        return Unavailable(f"{what}: no usable cluster configuration: {e}")
    if isinstance(e, (aiohttp.ClientConnectionError, ConnectionError, TimeoutError, asyncio.TimeoutError)):
        return Unavailable(f"{what}: the API server does not answer: {e!r}")
    if isinstance(e, aiohttp.ClientError):
        return Unavailable(f"{what}: talking to the API server failed: {e!r}")
    if isinstance(e, OpenApiException):
        return BackendError(f"{what}: the client refused the request: {e}")
    return BackendError(f"{what}: {e!r}")


TRANSLATED: tuple[type[BaseException], ...] = (
    OpenApiException,
    ConfigException,
    aiohttp.ClientError,
    ConnectionError,
    TimeoutError,
    ValueError,
)
"""What :func:`translate` is applied to at the call sites (ValueError: a body that is not JSON)."""
