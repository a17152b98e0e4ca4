"""A failed RPC as the platform's exception, saying what happened and what to do.

A status the server sent has the server's own message (``RESOURCE_EXHAUSTED`` "cannot start 512 desktop
sandboxes: ... pass wait_s to queue for capacity", ``NOT_FOUND``, a ``DEADLINE_EXCEEDED`` of its own such as "sandbox
... is busy"): it reaches the caller as written, in the class :func:`sandbox.wire.status.from_grpc` gives its status.

Some statuses grpc makes on the client's side, with a text that says nothing of the call:

- ``DEADLINE_EXCEEDED`` "Deadline Exceeded": the client's own deadline passed before the server answered;
- ``UNAVAILABLE`` "failed to connect to all addresses ...", "errors resolving ...": no connection at all;
- ``UNAVAILABLE`` "Socket closed", "Connection reset by peer", ...: the connection broke before the answer.

Those keep their class (``DeadlineExceeded``, ``Unavailable``: a caller's ``except`` still works), with a message
naming the call, the address and the timeout, and a hint. Only grpc's own texts are matched, whole or at their
start, so a server's message that happens to mention "Connection refused" (an agent it cannot reach) is left as is.
"""

from __future__ import annotations

import re

import grpc

from sandbox.errors import DeadlineExceeded, SandboxError, Unavailable
from sandbox.wire.status import ERROR_CODE_KEY, from_grpc

CREATE_METHODS = frozenset({"CreateSandbox", "CreateSandboxes"})
"""The calls whose deadline hint also suggests queueing for capacity (``wait_s``)."""

_GRPC_DEADLINE = re.compile(r"\s*deadline exceeded\s*", re.I)
"""grpc's own text for a deadline the client set and saw pass; a server's ``DeadlineExceeded`` says more."""

_NOT_CONNECTED = re.compile(
    r"\s*(failed to connect to all addresses|errors resolving|DNS resolution failed|connections to all backends "
    r"failing|Connection refused\s*$)",
    re.I,
)
_BROKEN = re.compile(
    r"\s*((recvmsg:|sendmsg:)?(Socket closed|Connection reset by peer|Broken pipe)|GOAWAY received|Stream removed|"
    r"Connection closed|keepalive watchdog timeout|Received RST_STREAM)",
    re.I,
)
"""grpc's texts for a connection that broke midway (the server stopped, restarted or dropped it)."""

_WHY = (
    ("connection refused", "connection refused"),
    ("errors resolving", "cannot resolve the host name"),
    ("dns resolution failed", "cannot resolve the host name"),
    ("connection timed out", "connection timed out"),
    ("no route to host", "no route to host"),
)

READINESS_HINT = "check its readiness (`GET /readyz` on its HTTP port, :8080 by default)"


def rpc_error(error: grpc.RpcError, target: str, *, method: str, timeout: float | None) -> SandboxError:
    """``error`` (sync or aio) of the call ``method`` to ``target`` made with a deadline of ``timeout`` seconds
    (None: none) as the platform's exception."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    trailer = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    error_code = next((str(v) for k, v in trailer or () if k == ERROR_CODE_KEY), None)
    return translate(code, details, target=target, method=method, timeout=timeout, error_code=error_code)


def translate(
    code: grpc.StatusCode,
    details: str | None,
    *,
    target: str,
    method: str,
    timeout: float | None,
    error_code: str | None = None,
) -> SandboxError:
    """A gRPC status and its details as the platform's exception (see the module's docstring)."""
    text = details or ""
    if code is grpc.StatusCode.DEADLINE_EXCEEDED and timeout is not None and _GRPC_DEADLINE.fullmatch(text):
        return deadline_exceeded(method, target, timeout)
    if code is grpc.StatusCode.UNAVAILABLE and _NOT_CONNECTED.match(text):
        return Unavailable(
            f"{method}: no control plane answers at {target} ({_why_not_connected(text)}): it is not running, or not "
            "reachable from here. Start one with `sandbox server` (or `make run` in a checkout), or point the "
            "client at yours: --target or SANDBOX_TARGET for the CLI, Client(target=...) in Python"
        )
    if code is grpc.StatusCode.UNAVAILABLE and _BROKEN.match(text):
        return Unavailable(
            f"{method}: the connection to the control plane at {target} broke before it answered ({text.strip()}): "
            f"it may have stopped, restarted or be overloaded; {READINESS_HINT} and retry (what the call asked "
            "for may or may not have been done)"
        )
    return from_grpc(code, details or str(code), error_code=error_code)


def deadline_exceeded(method: str, target: str, timeout: float) -> DeadlineExceeded:
    """The client gave up on ``method`` after ``timeout`` seconds with no answer from ``target``."""
    hint = (
        f"It may be overloaded or waiting on its engine: {READINESS_HINT}, or pass a larger timeout= "
        "(Client(target, timeout=...))"
    )
    if method in CREATE_METHODS:
        hint += "; to create when there is no room now, pass wait_s= to queue for capacity instead"
    return DeadlineExceeded(
        f"{method}: the control plane at {target} did not answer within {timeout:g} s (the client's timeout). {hint}"
    )


def _why_not_connected(details: str) -> str:
    lowered = details.lower()
    for phrase, why in _WHY:
        if phrase in lowered:
            return why
    return details.strip().splitlines()[-1] if details.strip() else "cannot connect"
