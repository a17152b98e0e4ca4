"""The one exception root of the platform.

    SandboxError
    ├── InvalidArgument        bad input: a field, an action, a path
    ├── NotFound               no such sandbox, file, session, image
    ├── PermissionDenied       the file API refused a path outside its roots
    ├── Unauthenticated        no or bad token
    ├── FailedPrecondition     the sandbox cannot do this now (dead, wrong kind)
    ├── ResourceExhausted      a size or count limit
    │   └── CapacityExhausted  no room on the host, or over the tenant's quota: what was asked, what is free
    ├── DeadlineExceeded       an operation ran past its deadline
    ├── Unavailable            the agent, engine or store does not answer
    ├── BackendError           the engine refused or failed an operation
    │   └── ImageBuildError    an image could not be built
    └── InternalError          a bug; never expected

Every boundary (docker SDK, agent frames, gRPC, HTTP) translates into this tree with
``raise X(...) from e``; the docker library's own exceptions never reach a caller. How each
class travels (its agent error code, gRPC status and HTTP status) is one table,
:data:`sandbox.wire.status.TABLE`, from which every mapping derives. This module imports
nothing (no grpc), so anything may raise these.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Root of every error the platform raises on purpose."""

    code = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(SandboxError):
    code = "invalid_argument"


class NotFound(SandboxError):
    code = "not_found"


class PermissionDenied(SandboxError):
    code = "permission_denied"


class Unauthenticated(SandboxError):
    code = "unauthenticated"


class FailedPrecondition(SandboxError):
    code = "failed_precondition"


class ResourceExhausted(SandboxError):
    code = "resource_exhausted"


class CapacityExhausted(ResourceExhausted):
    """The host or the tenant's quota cannot hold what was asked now (HTTP 429, gRPC RESOURCE_EXHAUSTED)."""

    code = "capacity_exhausted"


class DeadlineExceeded(SandboxError):
    code = "deadline_exceeded"


class Unavailable(SandboxError):
    code = "unavailable"


class BackendError(SandboxError):
    code = "backend_error"


class ImageBuildError(BackendError):
    code = "image_build_failed"


class InternalError(SandboxError):
    code = "internal"
