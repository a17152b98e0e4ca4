"""What the REST skin (and the web view's ticket route, which joins it under ``/v1``) promise in OpenAPI beyond
their bodies: the one error body, the statuses a route may answer with it, and the rules of the path parameters.

The OpenAPI document says what the server enforces: a request the schema allows is not refused for its form, and
every status a route answers with is listed (``tests/unit/api/rest/test_contract.py`` holds the server to both).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import Field

from sandbox.models import Model
from sandbox.service.snapshots import SNAPSHOT_NAME

SANDBOX_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
"""A sandbox id as the platform makes them (``sb-<kind>-<12 hex digits>``), or any other name of that alphabet."""

SandboxId = Annotated[
    str, Path(pattern=SANDBOX_ID_PATTERN, description="A sandbox id, as the create gave it: sb-<kind>-<12 hex digits>.")
]
SnapshotName = Annotated[
    str, Path(pattern=SNAPSHOT_NAME.pattern, description="1-63 of [a-z0-9_.-], starting with a letter or digit.")
]


class FieldError(Model):
    loc: list[str | int] = Field(description='Where: "body", "query", "path" or "header", then the field\'s path.')
    msg: str
    type: str


class ErrorDetail(Model):
    code: str = Field(description="What went wrong: invalid_argument, not_found, failed_precondition, ...")
    message: str = Field(description="For people; a 422's names each invalid field.")


class ErrorBody(Model):
    error: ErrorDetail
    detail: list[FieldError] | None = Field(None, description="A 422 of a malformed request: each invalid field.")


_DESCRIPTIONS: dict[int | str, str] = {
    400: "The body cannot be read (not UTF-8, or not the JSON its Content-Type says).",
    401: "No or bad bearer token.",
    403: "The path is outside the roots the sandbox's file API serves.",
    404: "No such sandbox (or not yours).",
    409: "Not now: the sandbox expired, or its kind or state cannot do this, or the host cannot run what it asks.",
    413: "The body is over its size limit.",
    422: "Invalid input; the message names the field.",
    429: "Admission refused it: the host has no room, or the tenant's quota is used up (docs/capacity.md). The "
    "message says what was asked, what is free and what to do; Retry-After says when to try again.",
    "5XX": "The engine, the agent or the state store failed or did not answer (502, 503, 504); 500: a bug.",
}


def error_responses(*statuses: int | str, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of these error statuses, each an :class:`ErrorBody` as JSON; ``descriptions``
    (``d404="..."``) replace the usual description of a status."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        description = descriptions.get(f"d{status}", _DESCRIPTIONS[status])
        out[status] = {"model": ErrorBody, "description": description}
    return out
