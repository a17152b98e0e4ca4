"""Rules of :mod:`sandbox.models`' strings, written as patterns so that the JSON Schema of a model (the REST API's
OpenAPI document) states them, and a request the schema allows is not refused for its form."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

VOLUME_NAME = r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$"
SNAPSHOT_NAME = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
"""A snapshot's name (the caller's own, or a task's ``task-<digest>``)."""
_SEGMENT = r"([^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+|\.)"
"""A path segment, any but '..' (with no lookahead: neither JSON Schema generators nor Rust's regex have it)."""
MOUNT_PATH = rf"^/+({_SEGMENT}/+)*{_SEGMENT}/*$"
"""An absolute path without a '..' segment."""
SYSTEM_DIR = r"^/(proc|sys|run/sandbox)/*$"
"""Where no volume may be mounted."""

COMMAND: dict[str, Any] = {
    "anyOf": [{"type": "string", "pattern": r"\S"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]
}
"""``Exec.cmd`` in JSON Schema: not empty, nor blank. The agent enforces it (the model lets an empty one through, so
that the wire's tests can carry one), and says so with a 422."""

EnvName = Annotated[str, Field(pattern=r"^[^=\x00]+$", description="An environment variable's name: no '=' or NUL.")]
EnvValue = Annotated[str, Field(pattern=r"^[^\x00]*$")]


def keys_must_match(schema: dict[str, Any]) -> None:
    """For a dict whose keys have a pattern: in JSON Schema, a key that fails it is refused, not merely unchecked
    (pydantic states the key pattern as ``patternProperties``, which lets any other key through)."""
    for pattern, values in schema.pop("patternProperties", {}).items():
        schema.update(propertyNames={"pattern": pattern}, additionalProperties=values)
