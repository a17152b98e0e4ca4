"""The API server's answers, as the platform's exceptions: ONE table by status code (and the few answers told apart
by the server's words), read by :func:`translate`.

Every call to the API server goes through :func:`translate` (via ``api.KubeApi``), so kubernetes_asyncio's and
aiohttp's exceptions never leave the backend: each becomes a :mod:`sandbox.errors` class, raised ``from`` the
original. The message names what was being done and carries the API server's own ``Status.message``.
"""

from __future__ import annotations

import asyncio
import json
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
        "RBAC: forbidden; the control plane's ServiceAccount needs this verb on this resource in the sandbox "
        "namespace (see the chart's Role)",
    ),
    404: (NotFound, "not found"),
    409: (FailedPrecondition, "conflict: it exists already, or it changed meanwhile"),
    410: (Unavailable, "gone: the resourceVersion watched is too old; list again"),
    415: (InvalidArgument, "the API server does not take this content type"),
    422: (InvalidArgument, "the API server refused the object as invalid"),
    429: (Unavailable, "the API server is throttling this client; retry"),
}
"""HTTP status -> (exception class, what it means). Any other 5xx is Unavailable; any other status a BackendError."""

REFINED: tuple[tuple[int, str, type[SandboxError], str, str], ...] = (
    (
        403,
        "exceeded quota",
        CapacityExhausted,
        "the sandbox namespace's ResourceQuota is used up (a ceiling the API server enforces; not RBAC)",
        "end other sandboxes, raise the quota (the chart's sandboxes.resourceQuota.hard), or ask for fewer resources",
    ),
    (
        403,
        "failed quota",
        BackendError,
        "a ResourceQuota of the sandbox namespace refuses the object as it is (not RBAC)",
        "the quota limits a resource the object does not state",
    ),
)
"""(HTTP status, words in the API server's message, exception class, what it means, what to do), read before
STATUS_TABLE: answers that share a status code but not a meaning (the ResourceQuota admission's 403 is no RBAC
refusal)."""


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
        return str(body.get("message") or body.get("reason") or "")[:500]
    return ""


def for_status(status: int, body: Any, what: str) -> SandboxError:
    """The exception for an HTTP status with its response body."""
    cls, meaning = STATUS_TABLE.get(status, (Unavailable if status >= 500 else BackendError, f"HTTP {status}"))
    if status >= 500 and status not in STATUS_TABLE:
        meaning = f"the API server failed (HTTP {status}); retry"
    detail = status_message(body)
    for code, words, refined, says, advice in REFINED:
        if code == status and words in detail:
            return refined(f"{what}: {says}: {detail}; {advice}")
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
