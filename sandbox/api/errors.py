"""The table from the platform's exceptions to gRPC status codes and HTTP statuses, and its inverses."""

from __future__ import annotations

import grpc

from sandbox import errors

# (gRPC status, HTTP status) for each error; the most specific class wins (walk the MRO).
_TABLE: dict[type[errors.SandboxError], tuple[grpc.StatusCode, int]] = {
    errors.InvalidArgument: (grpc.StatusCode.INVALID_ARGUMENT, 422),
    errors.NotFound: (grpc.StatusCode.NOT_FOUND, 404),
    errors.PermissionDenied: (grpc.StatusCode.PERMISSION_DENIED, 403),
    errors.Unauthenticated: (grpc.StatusCode.UNAUTHENTICATED, 401),
    errors.FailedPrecondition: (grpc.StatusCode.FAILED_PRECONDITION, 409),
    errors.ResourceExhausted: (grpc.StatusCode.RESOURCE_EXHAUSTED, 413),
    errors.DeadlineExceeded: (grpc.StatusCode.DEADLINE_EXCEEDED, 504),
    errors.Unavailable: (grpc.StatusCode.UNAVAILABLE, 503),
    errors.BackendError: (grpc.StatusCode.INTERNAL, 502),
    errors.InternalError: (grpc.StatusCode.INTERNAL, 500),
}

_FROM_GRPC: dict[grpc.StatusCode, type[errors.SandboxError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidArgument,
    grpc.StatusCode.NOT_FOUND: errors.NotFound,
    grpc.StatusCode.PERMISSION_DENIED: errors.PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: errors.Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPrecondition,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ResourceExhausted,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: errors.Unavailable,
}


# The statuses the HTTP framework answers with on its own (no platform error behind them), named as gRPC would.
_GRPC_OF_HTTP: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    405: grpc.StatusCode.UNIMPLEMENTED,
    **{status: code for code, status in _TABLE.values()},
}


def _lookup(error: errors.SandboxError) -> tuple[grpc.StatusCode, int]:
    for cls in type(error).__mro__:
        if cls in _TABLE:
            return _TABLE[cls]
    return grpc.StatusCode.INTERNAL, 500


def grpc_status(error: errors.SandboxError) -> grpc.StatusCode:
    return _lookup(error)[0]


def http_status(error: errors.SandboxError) -> int:
    return _lookup(error)[1]


def grpc_status_of_http(status: int) -> grpc.StatusCode | None:
    """The gRPC status of an HTTP status, for errors counted in one vocabulary across both transports."""
    return _GRPC_OF_HTTP.get(status)


def from_grpc(code: grpc.StatusCode, message: str) -> errors.SandboxError:
    """The SDK's side: a gRPC status back into the platform's exception."""
    return _FROM_GRPC.get(code, errors.InternalError)(message)
