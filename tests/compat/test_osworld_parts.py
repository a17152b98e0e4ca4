"""The parts of sandbox.compat.osworld that need no sandbox: the forwarder (against a stand-in control plane on
loopback), the download cache's names, and how DesktopEnv is handed the provider (against a stand-in module)."""

from __future__ import annotations

import socket
import sys
import threading
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.compat.osworld import cache, env
from sandbox.compat.osworld.forward import Forwarder, Upstream, rewrite_head
from sandbox.tasks import Fixtures, TaskError

PREFIX = "/v1/sandboxes/sb-desk-1/ports/5000"


def upstream(port: int = 1, cookie: bytes = b"sandbox_preview=abc") -> Upstream:
    return Upstream("127.0.0.1", port, False, PREFIX, lambda: [(b"Cookie", cookie)])


def test_a_request_goes_under_the_prefix_with_the_cookie_and_connection_close() -> None:
    head = b"POST /execute?x=1 HTTP/1.1\r\nHost: 127.0.0.1:4242\r\nConnection: keep-alive\r\nCookie: a=b\r\n\r\n"
    out, upgrade = rewrite_head(head, upstream(), upstream().credential())
    lines = out.split(b"\r\n")
    assert not upgrade
    assert lines[0] == b"POST " + PREFIX.encode() + b"/execute?x=1 HTTP/1.1"
    assert b"Host: 127.0.0.1:4242" in lines  # Chromium writes its websocket URLs with it
    assert b"Cookie: a=b; sandbox_preview=abc" in lines
    assert b"Connection: keep-alive" not in lines and lines[-3] == b"Connection: close"
    assert out.endswith(b"\r\n\r\n")


def test_a_websocket_handshake_keeps_its_upgrade() -> None:
    head = (
        b"GET /devtools/browser/x HTTP/1.1\r\nHost: 127.0.0.1:4242\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: k\r\n\r\n"
    )
    out, upgrade = rewrite_head(head, upstream(), [])
    assert upgrade
    assert out.startswith(b"GET " + PREFIX.encode() + b"/devtools/browser/x HTTP/1.1\r\n")
    assert b"Connection: Upgrade" in out and b"Connection: close" not in out


def test_an_absolute_target_keeps_its_path_and_garbage_is_refused() -> None:
    out, _ = rewrite_head(b"GET http://127.0.0.1:9/json/version HTTP/1.1\r\nHost: x\r\n\r\n", upstream(), [])
    assert out.startswith(b"GET " + PREFIX.encode() + b"/json/version HTTP/1.1")
    for bad in (b"hello\r\n\r\n", b"GET * HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nno colon\r\n\r\n"):
        with pytest.raises(ValueError):
            rewrite_head(bad, upstream(), [])


class StandIn:
    """A control plane stand-in on loopback: answers each request with the head it received; after a 101 it echoes
    bytes (a websocket's frames pass untouched)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            head, _, rest = data.partition(b"\r\n\r\n")
            self.heads.append(head)
            if b"Upgrade: websocket" in head:
                conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
                if rest:
                    conn.sendall(rest)
                while chunk := conn.recv(4096):
                    conn.sendall(chunk)
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(head), head))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    yield server
    server.close()


def _exchange(port: int, data: bytes, until: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        got = b""
        while until not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got


def test_the_forwarder_relays_many_connections_and_a_websocket(stand_in: StandIn) -> None:
    forwarder = Forwarder()
    try:
        _relays(forwarder, stand_in)
    finally:
        forwarder.stop()


def _relays(forwarder: Forwarder, stand_in: StandIn) -> None:
    port = forwarder.open(upstream(stand_in.port))
    answers = [_exchange(port, b"GET /screenshot HTTP/1.1\r\nHost: h\r\n\r\n", b"Connection: close") for _ in range(5)]
    assert all(a.startswith(b"HTTP/1.1 200 OK") and PREFIX.encode() + b"/screenshot" in a for a in answers)
    assert len(stand_in.heads) == 5

    handshake = b"GET /devtools/page/1 HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(handshake)
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(4096)
        assert got.startswith(b"HTTP/1.1 101")
        s.sendall(b"\x81\x05hello")
        echoed = b""
        while len(echoed) < 7:
            echoed += s.recv(4096)
        assert echoed == b"\x81\x05hello"
    forwarder.close(port)
    assert port not in forwarder.ports
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_the_cache_names_are_desktop_envs_and_a_missing_fixture_is_refused(tmp_path: Path) -> None:
    url = "https://files.example.test/data.csv"
    task: dict[str, Any] = {
        "id": "t1",
        "config": [{"type": "download", "parameters": {"files": [{"url": url, "path": "/home/user/Desktop/d.csv"}]}}],
        "evaluator": {
            "func": ["compare_text_file"],
            "result": [{"type": "vm_file", "path": "/x", "dest": "x"}],
            "expected": [{"type": "cloud_file", "path": [url, url], "dest": ["a.csv", "b.csv"], "multi": True}],
        },
    }
    assert cache.cached_files(task) == [
        (url, f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_d.csv"),
        (url, "a.csv"),
        (url, "b.csv"),
    ]
    fixture = tmp_path / "data.csv"
    fixture.write_text("a,b\n")
    written = cache.seed_download_cache(task, tmp_path / "cache", Fixtures(urls={url: fixture}))
    assert [p.read_text() for p in written] == ["a,b\n"] * 3
    assert all(p.parent == tmp_path / "cache" / "t1" for p in written)
    with pytest.raises(TaskError, match="no fixture"):
        cache.seed_download_cache(task, tmp_path / "cache", Fixtures())


@pytest.fixture
def fake_desktop_env(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A stand-in for ``desktop_env.desktop_env``: its factory names what it was asked for."""
    package = types.ModuleType("desktop_env")
    module = types.ModuleType("desktop_env.desktop_env")

    def create_vm_manager_and_provider(provider_name: str, region: str | None, use_proxy: bool = False) -> Any:
        return ("osworld's own", provider_name)

    module.create_vm_manager_and_provider = create_vm_manager_and_provider  # type: ignore[attr-defined]
    package.desktop_env = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "desktop_env", package)
    monkeypatch.setitem(sys.modules, "desktop_env.desktop_env", module)
    return module


def test_the_hook_hands_the_pair_only_to_the_thread_building_it(fake_desktop_env: types.ModuleType) -> None:
    manager: Any = "manager"
    provider: Any = "provider"
    env.install_hook()
    env.install_hook()  # idempotent: wrapped once
    factory = fake_desktop_env.create_vm_manager_and_provider
    assert getattr(factory, env.HOOK_MARK)
    assert factory("docker", None) == ("osworld's own", "docker")
    seen: list[Any] = []
    with env.providing(manager, provider):
        assert factory("docker", None) == (manager, provider)
        other = threading.Thread(target=lambda: seen.append(factory("vmware", None)))
        other.start()
        other.join()
    assert seen == [("osworld's own", "vmware")]
    assert factory("docker", None) == ("osworld's own", "docker")


def test_make_env_refuses_a_provider_name() -> None:
    with pytest.raises(TypeError, match="provider_name"):
        env.make_env(None, provider_name="docker")  # type: ignore[arg-type]


def test_a_credential_that_fails_is_a_502_naming_it() -> None:
    def broken() -> list[tuple[bytes, bytes]]:
        raise RuntimeError("sandbox sb-desk-1 not found")

    forwarder = Forwarder()
    try:
        port = forwarder.open(Upstream("127.0.0.1", 1, False, PREFIX, broken))
        answer = _exchange(port, b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", b"not found")
        assert answer.startswith(b"HTTP/1.1 502 Bad Gateway") and b"sandbox sb-desk-1 not found" in answer
    finally:
        forwarder.stop()
