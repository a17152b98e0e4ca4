"""The sandbox's own TCP ports: which are listening, and which a preview (a user's tunnel) may reach.

A *user port* is what ``sandbox.url(port)`` proxies to: any port from 1024 up, except the platform's own
(``reserved``: the VNC server, the browser's DevTools, the agent's TCP listener). Those are reached only through
their own routes (the web view's VNC websocket, the agent's ops), never through a preview URL, whatever listens
there. Ports below 1024 are refused too: nothing the sandbox user starts can bind them, so whatever is there is
the platform's or the image's, not the user's app.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

MIN_USER_PORT = 1024
MAX_PORT = 65535
_LISTEN = "0A"
_PROC_FILES = ("/proc/net/tcp", "/proc/net/tcp6")


def user_port_refusal(port: int, reserved: Iterable[int]) -> str | None:
    """Why ``port`` may not be previewed, or None when it may."""
    if not MIN_USER_PORT <= port <= MAX_PORT:
        return f"port {port} is not a user port (previews reach ports {MIN_USER_PORT}-{MAX_PORT})"
    if port in set(reserved):
        return f"port {port} is the platform's own (VNC, DevTools or the agent): it has its own route, no preview"
    return None


def parse_listening(text: str) -> list[tuple[str, int]]:
    """(local address, port) of every LISTEN socket in the text of /proc/net/tcp or tcp6."""
    found: list[tuple[str, int]] = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN:
            continue
        address, _, port = fields[1].rpartition(":")
        try:
            found.append((_address(address), int(port, 16)))
        except ValueError:
            continue
    return found


def _address(hex_address: str) -> str:
    """The textual address of /proc/net/tcp's little-endian hex (per 32-bit word) form."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return ".".join(str(b) for b in words)
    return str(ipaddress.IPv6Address(words))


def listening_ports(reserved: Iterable[int], files: Iterable[str] = _PROC_FILES) -> list[dict[str, Any]]:
    """The sandbox's listening TCP ports, one entry per port (its addresses merged), lowest first."""
    reserved = frozenset(reserved)
    by_port: dict[int, set[str]] = {}
    for path in files:
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        for address, port in parse_listening(text):
            by_port.setdefault(port, set()).add(address)
    return [
        {"port": port, "addresses": sorted(addresses), "previewable": user_port_refusal(port, reserved) is None}
        for port, addresses in sorted(by_port.items())
    ]
