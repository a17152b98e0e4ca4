"""Bearer tokens mapped to tenants. Tokens come from configuration, never from code."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path

from sandbox import environment
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
        """``{"<token>": "tenant"}`` or ``{"<token>": {"tenant": "t", "admin": true}}``; or, with quotas, the same
        under ``"tokens"`` beside ``"quotas"`` and ``"default_quota"`` (``sandbox.capacity.quotas``)."""
        if is_structured(raw):
            raw = dict(raw["tokens"])  # type: ignore[call-overload]
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
        return cls.from_mapping(load_document(path))


def is_structured(raw: dict[str, object]) -> bool:
    """Whether a tokens document has its tokens under ``"tokens"`` (with quotas beside them)."""
    return isinstance(raw.get("tokens"), dict)


def load_document(path: str | None = None) -> dict[str, object]:
    """The tokens document: a JSON file (``--tokens-file`` or ``SANDBOX_TOKENS_FILE``), else ``SANDBOX_TOKENS``, else
    empty."""
    path = path or environment.tokens_file()
    if path:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"cannot read tokens from {path}: {e}") from e
    else:
        inline = environment.tokens_inline()
        if not inline:
            return {}
        try:
            doc = json.loads(inline)
        except ValueError as e:
            raise InvalidArgument(f"SANDBOX_TOKENS is not valid JSON: {e}") from e
    if not isinstance(doc, dict):
        raise InvalidArgument("the tokens document must be a JSON object")
    return doc
