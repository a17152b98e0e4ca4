"""Short-lived, signed grants for the web view: a ticket opens one sandbox, a session lists them.

A token holder trades the bearer token for a *ticket* (``POST /v1/sandboxes/{id}/tickets``); the
ticket alone then opens that sandbox's view page, its actions feed and its VNC websocket, and
nothing else. A *session* is the same kind of signed grant for the list page, kept in a cookie so
that the bearer token itself never sits in the browser.

Both are ``<payload>.<signature>``: URL-safe base64 of a small JSON payload and of its
HMAC-SHA256 under a secret that is random per process unless one is given (so a restart of the
control plane ends every ticket). Nothing is stored server-side; a grant carries the principal it
was issued to and its expiry, and the signature keeps it from being altered or moved to another
sandbox.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from sandbox.errors import Unauthenticated
from sandbox.service.auth import Principal
from sandbox.store import Store

DEFAULT_TTL_S = 60.0
DEFAULT_SESSION_TTL_S = 8 * 3600.0
DEFAULT_PORT_TICKET_TTL_S = 300.0
MAX_PORT_TICKET_TTL_S = 24 * 3600.0
_TICKET = "ticket"
_SESSION = "session"
_PORT = "port"
_PORT_SESSION = "port-session"


@dataclass(frozen=True)
class TicketGrant:
    """What a valid ticket allows: viewing (and with ``control``, driving) one sandbox until ``expires_at``."""

    principal: Principal
    sandbox_id: str
    control: bool
    expires_at: float


class TicketIssuer:
    def __init__(
        self, secret: bytes | None = None, ttl_s: float = DEFAULT_TTL_S, *, session_ttl_s: float = DEFAULT_SESSION_TTL_S
    ) -> None:
        if secret is not None and len(secret) < 16:
            raise ValueError("a ticket secret must be at least 16 bytes long")
        if ttl_s <= 0 or session_ttl_s <= 0:
            raise ValueError("ticket lifetimes must be positive")
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self.session_ttl_s = session_ttl_s

    # ------------------------------------------------------------------ tickets: one sandbox

    def issue(self, principal: Principal, sandbox_id: str, *, control: bool) -> str:
        """A ticket for ``sandbox_id``. The caller has checked that ``principal`` can see it."""
        return self._sign({"use": _TICKET, "sid": sandbox_id, "ctl": control, **self._holder(principal, self.ttl_s)})

    def verify(self, ticket: str | None, sandbox_id: str) -> TicketGrant:
        payload = self._open(ticket, _TICKET, "ticket")
        if payload.get("sid") != sandbox_id:
            raise Unauthenticated(f"this ticket opens another sandbox, not {sandbox_id}")
        return TicketGrant(_principal(payload), sandbox_id, bool(payload.get("ctl")), float(payload["exp"]))

    # ------------------------------------------------------------------ port tickets: one port of one sandbox

    def issue_port(self, principal: Principal, sandbox_id: str, port: int, *, ttl_s: float | None = None) -> str:
        """A ticket for a preview URL: ``port`` of ``sandbox_id`` only, redeemable until it expires. The caller has
        checked that ``principal`` can see the sandbox."""
        ttl = DEFAULT_PORT_TICKET_TTL_S if ttl_s is None else min(max(ttl_s, 1.0), MAX_PORT_TICKET_TTL_S)
        return self._sign({"use": _PORT, "sid": sandbox_id, "port": port, **self._holder(principal, ttl)})

    def issue_port_session(self, principal: Principal, sandbox_id: str, port: int) -> str:
        """What a redeemed port ticket becomes: the preview's cookie, as long-lived as a list-page session."""
        return self._sign(
            {"use": _PORT_SESSION, "sid": sandbox_id, "port": port, **self._holder(principal, self.session_ttl_s)}
        )

    def verify_port(self, ticket: str | None, sandbox_id: str, port: int, *, session: bool = False) -> TicketGrant:
        """The grant of a port ticket (or, with ``session``, of a preview cookie) for exactly this sandbox and port."""
        payload = self._open(ticket, _PORT_SESSION if session else _PORT, "preview cookie" if session else "ticket")
        if payload.get("sid") != sandbox_id or payload.get("port") != port:
            raise Unauthenticated(f"this ticket opens another sandbox or port, not port {port} of {sandbox_id}")
        return TicketGrant(_principal(payload), sandbox_id, False, float(payload["exp"]))

    # ------------------------------------------------------------------ sessions: the list page

    def issue_session(self, principal: Principal) -> str:
        return self._sign({"use": _SESSION, **self._holder(principal, self.session_ttl_s)})

    def verify_session(self, session: str | None) -> Principal:
        return _principal(self._open(session, _SESSION, "session"))

    # ------------------------------------------------------------------ signing

    @staticmethod
    def _holder(principal: Principal, ttl_s: float) -> dict[str, Any]:
        return {"ten": principal.tenant, "adm": principal.admin, "exp": round(time.time() + ttl_s, 3)}

    def _sign(self, payload: dict[str, Any]) -> str:
        body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        return f"{body}.{_b64(self._mac(body))}"

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._secret, body.encode(), hashlib.sha256).digest()

    def _open(self, token: str | None, use: str, what: str) -> dict[str, Any]:
        if not token:
            raise Unauthenticated(f"a {what} is required")
        body, _, signature = token.partition(".")
        try:
            valid = hmac.compare_digest(_unb64(signature), self._mac(body))
            payload = json.loads(_unb64(body)) if valid else None
        except (ValueError, UnicodeError):
            valid, payload = False, None
        if not valid or not isinstance(payload, dict) or not isinstance(payload.get("exp"), int | float):
            raise Unauthenticated(f"the {what} is not valid (malformed, or signed by another server)")
        if payload.get("use") != use:
            raise Unauthenticated(f"this is not a {what}")
        if payload["exp"] <= time.time():
            raise Unauthenticated(f"the {what} has expired; ask for a new one")
        return payload


def _principal(payload: dict[str, Any]) -> Principal:
    tenant = payload.get("ten")
    if not isinstance(tenant, str):
        raise Unauthenticated("the grant names no tenant")
    return Principal(tenant, admin=bool(payload.get("adm")))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


SECRETS = "secrets"
"""Collection: name -> {"hex": ...}, shared by the replicas of one store."""


async def shared_ticket_secret(store: Store) -> bytes:
    """The ticket signing secret every replica on ``store`` uses, made by whichever asks first,
    so a ticket issued by one replica opens the view on any other."""
    await store.put_if_absent(SECRETS, "webview-tickets", {"hex": secrets.token_hex(32)})
    doc = await store.get(SECRETS, "webview-tickets")
    if doc is None:
        raise RuntimeError("the ticket secret vanished from the store")
    return bytes.fromhex(str(doc["hex"]))
