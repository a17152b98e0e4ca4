"""Bearer tokens mapped to tenants. Tokens come from configuration, never from code."""

from __future__ import annotations

import hmac
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sandbox.errors import InvalidArgument, Unauthenticated

ANONYMOUS_TENANT = "default"


@dataclass(frozen=True)
class Principal:
    tenant: str
    admin: bool = False

    def can_see(self, tenant: str) -> bool:
        return self.admin or tenant == self.tenant


class TokenRegistry:
    """Resolves a bearer token to the principal it stands for.

    With no tokens configured every caller is the admin of the ``default`` tenant; the
    server then listens on loopback only.
    """

    def __init__(self, tokens: dict[str, Principal]) -> None:
        self._tokens = dict(tokens)

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def authenticate(self, token: str | None) -> Principal:
        if not self._tokens:
            return Principal(ANONYMOUS_TENANT, admin=True)
        if not token:
            raise Unauthenticated("a bearer token is required (Authorization: Bearer <token>)")
        for known, principal in self._tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                return principal
        raise Unauthenticated("the bearer token is not valid")

    @classmethod
    def from_mapping(cls, raw: dict[str, object]) -> TokenRegistry:
        """``{"<token>": "tenant"}`` or ``{"<token>": {"tenant": "t", "admin": true}}``."""
        tokens: dict[str, Principal] = {}
        for token, value in raw.items():
            if len(token) < 16:
                raise InvalidArgument("every token must be at least 16 characters long")
            if isinstance(value, str):
                tokens[token] = Principal(value)
            elif isinstance(value, dict) and isinstance(value.get("tenant"), str):
                tokens[token] = Principal(value["tenant"], admin=bool(value.get("admin", False)))
            else:
                raise InvalidArgument(f"token entry for tenant {value!r} must be a tenant name or {{tenant, admin}}")
        return cls(tokens)

    @classmethod
    def load(cls, path: str | None = None) -> TokenRegistry:
        """From a JSON file (``--tokens-file`` or ``SANDBOX_TOKENS_FILE``), else ``SANDBOX_TOKENS`` as JSON."""
        path = path or os.environ.get("SANDBOX_TOKENS_FILE")
        if path:
            try:
                return cls.from_mapping(json.loads(Path(path).read_text()))
            except (OSError, ValueError) as e:
                raise InvalidArgument(f"cannot read tokens from {path}: {e}") from e
        inline = os.environ.get("SANDBOX_TOKENS")
        if inline:
            try:
                return cls.from_mapping(json.loads(inline))
            except ValueError as e:
                raise InvalidArgument(f"SANDBOX_TOKENS is not valid JSON: {e}") from e
        return cls({})
