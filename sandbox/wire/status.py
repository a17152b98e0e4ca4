"""The one table of the platform's error statuses, and every mapping derived from it.

Each row of :data:`TABLE` names an exception of :mod:`sandbox.errors`, the agent protocol's error
code for it (``None``: the agent never sends it), its gRPC status and its HTTP status. Nothing
else maps errors by hand; from the table come:

- exception → gRPC status and → HTTP status (:func:`grpc_status`, :func:`http_status`): the
  exception's own row. Every class of ``sandbox.errors`` has one (``tests/unit/wire/test_status.py``);
  a subclass defined elsewhere takes its nearest ancestor's (the ``SandboxError`` row at worst).
- gRPC status → exception (:func:`from_grpc`, the SDK's side): the **first** row with that
  status. Only ``INTERNAL`` is shared (``InternalError``, ``BackendError``, ``ImageBuildError``,
  ``SandboxError``); ``InternalError`` is listed first on purpose, so that is what the SDK raises.
  A status no row has (``CANCELLED``, ``UNKNOWN``, ...) is ``InternalError`` too.
- agent code → exception (:func:`from_agent`): the row with that code (each code is in one row;
  an unknown code is ``InternalError``).
- HTTP status → gRPC status and error code (:func:`grpc_status_of_http`, :func:`error_code_of_http`),
  for the errors the HTTP framework answers on its own (unknown route, unreadable body, ...):
  the first row with that HTTP status, plus :data:`FRAMEWORK_STATUSES` for the statuses no
  exception has (400, 405).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple, TypeVar

import grpc

from sandbox import errors
from sandbox.protocol import ErrorCode

K = TypeVar("K", bound=Hashable)


class Row(NamedTuple):
    error: type[errors.SandboxError]
    agent_code: str | None
    grpc_status: grpc.StatusCode
    http_status: int


_G = grpc.StatusCode

TABLE: tuple[Row, ...] = (
    Row(errors.InvalidArgument, ErrorCode.BAD_REQUEST, _G.INVALID_ARGUMENT, 422),
    Row(errors.NotFound, ErrorCode.NOT_FOUND, _G.NOT_FOUND, 404),
    Row(errors.PermissionDenied, ErrorCode.PERMISSION_DENIED, _G.PERMISSION_DENIED, 403),
    Row(errors.Unauthenticated, ErrorCode.UNAUTHENTICATED, _G.UNAUTHENTICATED, 401),
    Row(errors.FailedPrecondition, None, _G.FAILED_PRECONDITION, 409),
    Row(errors.ResourceExhausted, ErrorCode.TOO_LARGE, _G.RESOURCE_EXHAUSTED, 413),
    # After ResourceExhausted: gRPC's RESOURCE_EXHAUSTED reaches the SDK as its parent, which catches both.
    Row(errors.CapacityExhausted, None, _G.RESOURCE_EXHAUSTED, 429),
    Row(errors.DeadlineExceeded, ErrorCode.TIMEOUT, _G.DEADLINE_EXCEEDED, 504),
    Row(errors.Unavailable, ErrorCode.UNAVAILABLE, _G.UNAVAILABLE, 503),
    # The first INTERNAL row: the exception the SDK raises for INTERNAL (and for any status not in the table).
    Row(errors.InternalError, ErrorCode.INTERNAL, _G.INTERNAL, 500),
    Row(errors.BackendError, None, _G.INTERNAL, 502),
    Row(errors.ImageBuildError, None, _G.INTERNAL, 502),
    Row(errors.SandboxError, None, _G.INTERNAL, 500),  # the root: a bare SandboxError is a bug
)
"""(exception, agent code, gRPC status, HTTP status); the order matters where rows share a status."""


class FrameworkStatus(NamedTuple):
    """An HTTP status the framework answers with on its own, with no exception behind it."""

    http_status: int
    grpc_status: grpc.StatusCode
    code: str


FRAMEWORK_STATUSES: tuple[FrameworkStatus, ...] = (
    FrameworkStatus(400, _G.INVALID_ARGUMENT, "invalid_argument"),  # an unreadable body
    FrameworkStatus(405, _G.UNIMPLEMENTED, "method_not_allowed"),
)
"""The HTTP statuses no row of :data:`TABLE` has; the others take the first row with that status."""

UNKNOWN_HTTP_CODE = "http_error"
"""The error code of an HTTP status neither table knows."""


def _first_by(key: Callable[[Row], K | None]) -> dict[K, Row]:
    """Each key's first row (rows whose key is None are left out): the table's order settles shared statuses."""
    out: dict[K, Row] = {}
    for row in TABLE:
        value = key(row)
        if value is not None:
            out.setdefault(value, row)
    return out


_BY_ERROR: dict[type[errors.SandboxError], Row] = {row.error: row for row in TABLE}
_BY_CODE: dict[str, Row] = {row.error.code: row for row in TABLE}
_BY_GRPC = _first_by(lambda row: row.grpc_status)
_BY_AGENT = _first_by(lambda row: row.agent_code)
_BY_HTTP: dict[int, tuple[grpc.StatusCode, str]] = {
    **{http: (row.grpc_status, row.error.code) for http, row in _first_by(lambda row: row.http_status).items()},
    **{s.http_status: (s.grpc_status, s.code) for s in FRAMEWORK_STATUSES},
}


def row_of(error: errors.SandboxError) -> Row:
    """The row of ``error``'s class, or of its nearest ancestor that has one."""
    for cls in type(error).__mro__:
        row = _BY_ERROR.get(cls)
        if row is not None:
            return row
    return _BY_ERROR[errors.SandboxError]  # pragma: no cover - every SandboxError has the root in its MRO


def grpc_status(error: errors.SandboxError) -> grpc.StatusCode:
    """The gRPC status the server answers ``error`` with."""
    return row_of(error).grpc_status


def http_status(error: errors.SandboxError) -> int:
    """The HTTP status the REST API (and the web view) answers ``error`` with."""
    return row_of(error).http_status


ERROR_CODE_KEY = "sandbox-error-code"
"""Trailing metadata of a failed call: the exception's own ``code``, which tells apart the classes that share a gRPC
status with a parent (``CapacityExhausted`` under ``RESOURCE_EXHAUSTED``)."""


def from_grpc(code: grpc.StatusCode, message: str, *, error_code: str | None = None) -> errors.SandboxError:
    """The SDK's side: a gRPC status back into the platform's exception: the class ``error_code`` (the call's
    trailing metadata) names when it has that status, else the first row with that status."""
    named = _BY_CODE.get(error_code or "")
    if named is not None and named.grpc_status is code and named.grpc_status is not grpc.StatusCode.INTERNAL:
        return named.error(message)
    row = _BY_GRPC.get(code)
    return (row.error if row is not None else errors.InternalError)(message)


def from_agent(code: str, message: str) -> errors.SandboxError:
    """The exception for an error frame the agent sent."""
    row = _BY_AGENT.get(code)
    return (row.error if row is not None else errors.InternalError)(message)


def grpc_status_of_http(status: int) -> grpc.StatusCode | None:
    """The gRPC status of an HTTP status, for errors counted in one vocabulary across both transports."""
    known = _BY_HTTP.get(status)
    return known[0] if known is not None else None


def error_code_of_http(status: int) -> str:
    """The error code (``SandboxError.code``'s vocabulary) of an HTTP status the framework answered with."""
    known = _BY_HTTP.get(status)
    return known[1] if known is not None else UNKNOWN_HTTP_CODE


def grpc_status_of_number(number: int) -> grpc.StatusCode:
    """A gRPC status from its number (as a ``StepError`` carries it); ``UNKNOWN`` for a number grpc does not know."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN
