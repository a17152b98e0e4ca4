"""Minting preview URLs: a port ticket for one port of one sandbox, and the URL that carries it."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from sandbox.models.preview import PortUrl
from sandbox.service.acting import check_user_port
from sandbox.service.auth import Principal
from sandbox.service.service import SandboxService
from sandbox.service.tickets import TicketIssuer

WILDCARDS = ("", "0.0.0.0", "::")


def port_path(sandbox_id: str, port: int, *, full_path: bool = False) -> str:
    """The path prefix of a preview of ``port``, with its trailing slash: ``/v1/sandboxes/{id}/ports/{port}/``
    (the proxy strips it before the app sees the path), or with ``full_path`` ``/v1/sandboxes/{id}/apps/{port}/``
    (the app gets the whole path: give it this as its base path)."""
    return f"/v1/sandboxes/{sandbox_id}/{'apps' if full_path else 'ports'}/{port}/"


async def port_url(
    service: SandboxService,
    tickets: TicketIssuer,
    principal: Principal,
    sandbox_id: str,
    port: int,
    *,
    ttl_s: float | None = None,
    base_url: str = "",
    full_path: bool = False,
) -> PortUrl:
    """The preview URL of ``port`` in ``sandbox_id`` for ``principal`` (who must see the sandbox); ``base_url`` is
    the control plane's HTTP address as its callers reach it (``""``: the URL is a path); ``full_path``: the form
    whose app gets the whole path, prefix included (see :func:`port_path`). The ticket opens both forms."""
    check_user_port(port)
    await service.get(principal, sandbox_id)
    ticket = tickets.issue_port(principal, sandbox_id, port, ttl_s=ttl_s)
    grant = tickets.verify_port(ticket, sandbox_id, port)
    path = port_path(sandbox_id, port, full_path=full_path)
    url = f"{base_url.rstrip('/')}{path}?ticket={ticket}"
    return PortUrl(port=port, url=url, path=path, ticket=ticket, expires_at=grant.expires_at)


def http_base_url(host: str, port: int) -> str:
    """The control plane's HTTP address from its listen address: ``http://host:port``, a wildcard bind (every
    interface) named by the machine's host name, an IPv6 literal in brackets."""
    if host in WILDCARDS:
        host = socket.gethostname()
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"http://{host}:{port}"


@dataclass
class PreviewLinks:
    """What a skin with no HTTP request at hand (gRPC) mints preview URLs with: the ticket issuer the process's HTTP
    proxy checks tickets with (one per process, shared by every skin), and the HTTP address callers reach the
    control plane at (the ``public_url`` setting, else the HTTP listen address; ``""``: URLs are paths)."""

    tickets: TicketIssuer = field(default_factory=TicketIssuer)
    base_url: str = ""
