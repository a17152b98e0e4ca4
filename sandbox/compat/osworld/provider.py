"""OSWorld's provider and VM manager, over this platform's SDK.

``desktop_env`` asks a provider for five things; here each is one SDK call (the classes duck-type
``desktop_env.providers.base.Provider`` and ``VMManager``, so this module needs no ``desktop_env`` to import):

=========================  ==============================================================================
OSWorld asks               this platform does
=========================  ==============================================================================
``get_vm_path``            ``client.create(kind, screen=...)``: a desktop sandbox; its id is the "VM path"
``start_emulator``         attaches to it (``client.get`` for an id given as ``path_to_vm``), opens a
                           loopback forwarder per OSWorld port, waits until the in-VM API answers
``get_ip_address``         ``127.0.0.1:<server>:<chromium>:<vnc>:<vlc>``: the forwarders' ports (the form
                           OSWorld's Docker provider returns, so ``DesktopEnv`` takes each port from it)
``revert_to_snapshot``     ``sandbox.reset()`` (a fresh instance of the spec: tens of milliseconds from a
                           warm pool), or ``reset(snapshot=name)`` for a snapshot ``save_state`` took
``save_state``             ``sandbox.snapshot(name)``
``stop_emulator``          closes the forwarders and deletes the sandbox (one it created; an attached one
                           only when told to)
=========================  ==============================================================================

The forwarders reach the sandbox through the control plane's preview route (see :mod:`.forward`), with a
ticket minted by ``sandbox.url(port)`` traded once for its cookie: no network in the sandbox, no port published.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import httpx

from sandbox.client import Client, Sandbox
from sandbox.compat.osworld.forward import Forwarder, Upstream, shared_forwarder
from sandbox.errors import FailedPrecondition, InvalidArgument, Unavailable

INITIAL_SNAPSHOT = "init_state"
"""``DesktopEnv``'s default ``snapshot_name``: the sandbox's initial state, what a plain reset gives."""
TICKET_TTL_S = 86400.0
COOKIE_REFRESH_S = 3600.0
"""A preview cookie lasts hours; a forwarder trades a new ticket for a new one after this long."""
READY_POLL_S = 0.2


@dataclass(frozen=True)
class Ports:
    """The sandbox ports OSWorld's four port slots lead to. ``chromium`` is 1337, where OSWorld's Chrome tasks start
    Chrome's DevTools (``google-chrome --remote-debugging-port=1337``): the sandbox's own 9222 is the platform's
    and no preview reaches it."""

    server: int = 5000
    chromium: int = 1337
    vnc: int = 8006
    vlc: int = 8080

    def slots(self) -> dict[str, int]:
        return {"server": self.server, "chromium": self.chromium, "vnc": self.vnc, "vlc": self.vlc}


class PreviewCredential:
    """The headers that open one port's preview: a ``Cookie`` traded for a ticket, re-traded now and then."""

    def __init__(self, sandbox: Sandbox, port: int) -> None:
        self.sandbox = sandbox
        self.port = port
        self._lock = threading.Lock()
        self._cookie: bytes | None = None
        self._at = 0.0

    def __call__(self) -> list[tuple[bytes, bytes]]:
        with self._lock:
            if self._cookie is None or time.monotonic() - self._at > COOKIE_REFRESH_S:
                self._cookie = _trade(self.sandbox.url(self.port, ttl=TICKET_TTL_S))
                self._at = time.monotonic()
            return [(b"Cookie", self._cookie)]


def _trade(url: str) -> bytes:
    """Redeem a preview URL's ticket: the ``Cookie`` value the control plane set for it."""
    response = httpx.get(url, follow_redirects=False, timeout=30)
    jar: SimpleCookie = SimpleCookie()
    for header in response.headers.get_list("set-cookie"):
        jar.load(header)
    if response.status_code >= 400 or not jar:
        raise Unavailable(f"the control plane did not trade the preview ticket for a cookie: {response.status_code}")
    return "; ".join(f"{k}={m.value}" for k, m in jar.items()).encode()


def upstream_for(sandbox: Sandbox, port: int) -> Upstream:
    """The control plane's preview route to ``port`` of ``sandbox``, from the URL the SDK mints."""
    parts = urlsplit(sandbox.url(port, ttl=TICKET_TTL_S))
    tls = parts.scheme == "https"
    host = parts.hostname or "127.0.0.1"
    return Upstream(
        host=host,
        port=parts.port or (443 if tls else 80),
        tls=tls,
        prefix=parts.path.rstrip("/"),
        credential=PreviewCredential(sandbox, port),
    )


@dataclass
class PlatformProvider:
    """One OSWorld environment's machine: a desktop sandbox, and loopback ports leading to it.

    ``spec`` is passed to ``client.create`` (image, resources, ttl_s, ...); ``screen`` comes from ``DesktopEnv``'s
    ``screen_size`` unless ``spec`` sets it. ``ready_timeout_s`` bounds the wait for the in-VM API after a start or a
    revert; ``create_wait_s`` how long a create may queue for capacity (docs/capacity.md) when the host is full, as
    OSWorld's parallel runners start many at once. ``delete_on_stop``: whether ``DesktopEnv.close`` deletes a
    sandbox it attached to (one it created is always deleted)."""

    client: Client
    kind: str = "desktop"
    spec: Mapping[str, Any] = field(default_factory=dict)
    ports: Ports = field(default_factory=Ports)
    ready_timeout_s: float = 180.0
    create_wait_s: float = 120.0
    delete_on_stop: bool = False
    forwarder: Forwarder = field(default_factory=shared_forwarder)
    region: str | None = None
    sandbox: Sandbox | None = None
    local: dict[str, int] = field(default_factory=dict)
    created: bool = False
    reverts: int = 0

    # ------------------------------------------------------------------ what the manager asks

    def allocate(self, screen_size: tuple[int, int] | None) -> str:
        """A new sandbox for this environment; its id (OSWorld's ``path_to_vm``)."""
        spec = dict(self.spec)
        if screen_size is not None and "screen" not in spec:
            spec["screen"] = {"width": int(screen_size[0]), "height": int(screen_size[1])}
        self.sandbox = self.client.create(self.kind, wait_s=self.create_wait_s, **spec)
        self.created = True
        return self.sandbox.id

    # ------------------------------------------------------------------ desktop_env's Provider

    def start_emulator(self, path_to_vm: str, headless: bool = True, os_type: str = "Ubuntu", *_: Any) -> None:
        """Attach to ``path_to_vm`` (a sandbox id), open the forwarders once, wait for the in-VM API."""
        if os_type.lower() not in ("ubuntu", "linux"):
            raise InvalidArgument(f"OSWorld's {os_type} VM has no counterpart here: the desktop sandbox runs Linux")
        if self.sandbox is None or self.sandbox.id != path_to_vm:
            self._close_forwarders()
            self.sandbox = self.client.get(path_to_vm)
        if not self.local:
            sandbox = self.sandbox
            self.local = {slot: self.forwarder.open(upstream_for(sandbox, p)) for slot, p in self.ports.slots().items()}
        self.wait_ready()

    def get_ip_address(self, path_to_vm: str) -> str:
        if not self.local:
            raise FailedPrecondition(f"the environment of {path_to_vm} is not started: start_emulator first")
        ports = [self.local[s] for s in ("server", "chromium", "vnc", "vlc")]
        return ":".join(["127.0.0.1", *map(str, ports)])

    def save_state(self, path_to_vm: str, snapshot_name: str) -> None:
        self._attached(path_to_vm).snapshot(snapshot_name)

    def revert_to_snapshot(self, path_to_vm: str, snapshot_name: str) -> str:
        """The platform's reset: a fresh instance (of the spec, or of a snapshot this environment saved). The id,
        and so ``path_to_vm`` and the forwarders, stay."""
        sandbox = self._attached(path_to_vm)
        sandbox.reset(None if snapshot_name in (INITIAL_SNAPSHOT, "", None) else snapshot_name)
        self.reverts += 1
        return path_to_vm

    def stop_emulator(self, path_to_vm: str, *_: Any, **__: Any) -> None:
        self._close_forwarders()
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None and (self.created or self.delete_on_stop):
            sandbox.close()

    # ------------------------------------------------------------------ helpers

    def server_url(self, path: str = "") -> str:
        """The in-VM API's URL on loopback (``http://127.0.0.1:<port>/path``)."""
        return f"http://127.0.0.1:{self.local['server']}/{path.lstrip('/')}"

    def wait_ready(self) -> None:
        """Until the in-VM API answers ``/screenshot`` (as OSWorld's Docker provider waits); ``Unavailable`` after
        ``ready_timeout_s``, naming what it last saw."""
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer"
        while True:
            try:
                response = httpx.get(self.server_url("screenshot"), timeout=10)
                if response.status_code == 200:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as e:
                last = repr(e)
            if time.monotonic() > deadline:
                sid = self.sandbox.id if self.sandbox else "?"
                raise Unavailable(
                    f"the OSWorld API in sandbox {sid} (port {self.ports.server}) did not answer within "
                    f"{self.ready_timeout_s:.0f}s: {last}"
                )
            time.sleep(READY_POLL_S)

    def _attached(self, path_to_vm: str) -> Sandbox:
        if self.sandbox is None or self.sandbox.id != path_to_vm:
            self.sandbox = self.client.get(path_to_vm)
        return self.sandbox

    def _close_forwarders(self) -> None:
        local, self.local = self.local, {}
        for port in local.values():
            self.forwarder.close(port)


@dataclass
class PlatformVMManager:
    """OSWorld's VM registry, which the control plane keeps here: ``get_vm_path`` makes a sandbox, the rest is a
    no-op (leases, not a file of VM paths, say which sandbox is whose)."""

    provider: PlatformProvider
    checked_and_cleaned: bool = True

    def get_vm_path(
        self, os_type: str = "Ubuntu", region: str | None = None, screen_size: tuple[int, int] | None = None, **_: Any
    ) -> str:
        return self.provider.allocate(screen_size)

    def initialize_registry(self, **_: Any) -> None:
        return None

    def add_vm(self, vm_path: str, *_: Any, **__: Any) -> None:
        return None

    def delete_vm(self, vm_path: str, *_: Any, **__: Any) -> None:
        return None

    def occupy_vm(self, vm_path: str, *_: Any, **__: Any) -> None:
        return None

    def list_free_vms(self, *_: Any, **__: Any) -> list[str]:
        return []

    def check_and_clean(self, *_: Any, **__: Any) -> None:
        return None
