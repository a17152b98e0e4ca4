"""Preview URLs through a real `sandbox server` and a real, network-none terminal sandbox: HTTP, redirects, a
streamed 20 MiB download, a websocket, and who may open them (bearer token, port tickets, their cookie)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import OWNER, RUN_ID
from tests.docker.servers import ServerProcess, started
from tests.polling import wait_until

pytestmark = pytest.mark.docker

TOKEN = "preview-alpha-token-0123456789"
OTHER_TOKEN = "preview-beta-token-0123456789"
STATIC_PORT, APP_PORT, CLOSED_PORT = 8000, 8001, 8009
MIB = 1 << 20

# A stdlib app for the sandbox: /stream writes 1 MiB, waits for /tmp/go, then 19 MiB more; /ws echoes websocket
# text messages (a minimal RFC 6455 server: no websockets package in the terminal image).
APP = r"""
import asyncio, base64, hashlib, os, struct
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
async def handle(r, w):
    head = await r.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    path = lines[0].split()[1]
    hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    if path.startswith("/ws"):
        accept = base64.b64encode(hashlib.sha1(hdrs["sec-websocket-key"].encode() + GUID).digest())
        w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            b0, b1 = await r.readexactly(2)
            n = b1 & 127
            if n == 126: n = struct.unpack(">H", await r.readexactly(2))[0]
            elif n == 127: n = struct.unpack(">Q", await r.readexactly(8))[0]
            mask = await r.readexactly(4)
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(await r.readexactly(n)))
            if b0 & 15 == 8:
                w.write(b"\x88\x02\x03\xe8"); await w.drain(); w.close(); return
            out = ("echo:" + data.decode() + " prefix=" + hdrs.get("x-forwarded-prefix", "")).encode()
            w.write(bytes([0x81, 126]) + struct.pack(">H", len(out)) + out if len(out) > 125
                    else bytes([0x81, len(out)]) + out)
            await w.drain()
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (20 << 20))
    w.write(b"a" * (1 << 20)); await w.drain()
    while not os.path.exists("/tmp/go"):
        await asyncio.sleep(0.02)
    for _ in range(19):
        w.write(b"b" * (1 << 20)); await w.drain()
    w.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 8001)
    await server.serve_forever()
asyncio.run(main())
"""


class Server:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)

    def ok(self, response: httpx.Response) -> Any:
        assert response.status_code < 300, f"{response.status_code}: {response.text}"
        return response.json() if response.content else None

    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> dict[str, Any]:
        body = {"cmd": cmd, "keep_background": keep_background}
        return dict(self.ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/exec", json=body)))


@pytest.fixture(scope="module")
def server(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real control plane, its containers labelled with this test run's owner."""
    process = ServerProcess(
        tmp_path_factory.mktemp("preview-server"), owner=OWNER, socket_root=f"/run/sbx-test-{RUN_ID}",
        tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"},
    )  # fmt: skip
    with started(process):
        server = Server(process.http_url)
        try:
            yield server
        finally:
            server.http.close()


@pytest.fixture(scope="module")
def sandbox_id(server: Server) -> Iterator[str]:
    """A network-none terminal sandbox serving /workspace on 8000 (http.server) and the app above on 8001."""
    info = server.ok(server.http.post("/v1/sandboxes", json={"kind": "terminal", "network": "none"}))
    try:
        assert info["spec"]["network"] == "none"
        sid = info["id"]
        server.exec(sid, "mkdir -p /workspace/site/sub && echo hello-preview > /workspace/site/index.txt")
        server.exec(sid, "cat > /tmp/app.py <<'EOF'\n" + APP + "\nEOF")
        server.exec(sid, f"cd /workspace/site && python3 -m http.server {STATIC_PORT} --bind 127.0.0.1 "
                         ">/tmp/static.log 2>&1 &", keep_background=True)  # fmt: skip
        server.exec(sid, "python3 /tmp/app.py >/tmp/app.log 2>&1 &", keep_background=True)

        def listening() -> bool:
            ports = server.ok(server.http.get(f"/v1/sandboxes/{sid}/ports"))
            return {STATIC_PORT, APP_PORT} <= {p["port"] for p in ports if p["previewable"]}

        wait_until(listening, within=20, what="the sandbox's servers to listen")
        yield sid
    finally:
        server.http.delete(f"/v1/sandboxes/{info['id']}")


def prefix(sandbox_id: str, port: int) -> str:
    return f"/v1/sandboxes/{sandbox_id}/ports/{port}"


def test_http_with_the_bearer_token_paths_queries_and_redirects(server: Server, sandbox_id: str) -> None:
    base = prefix(sandbox_id, STATIC_PORT)
    response = server.http.get(f"{base}/index.txt", params={"q": "1"})
    assert response.status_code == 200, response.text
    assert response.text == "hello-preview\n"
    bare = server.http.get(base)  # the prefix itself: on to the slash, so relative links work
    assert bare.status_code == 308 and bare.headers["location"] == base + "/"
    moved = server.http.get(f"{base}/sub")  # http.server redirects a directory to its slash form, from "/"
    assert moved.status_code == 301
    assert moved.headers["location"] == f"{base}/sub/"
    assert server.http.get(f"{base}/").status_code == 200


def test_a_closed_port_is_a_clear_502_and_platform_ports_are_refused(server: Server, sandbox_id: str) -> None:
    closed = server.http.get(prefix(sandbox_id, CLOSED_PORT) + "/")
    assert closed.status_code == 502
    assert f"port {CLOSED_PORT}" in closed.json()["error"]["message"]
    assert server.http.get(prefix(sandbox_id, 5900) + "/").status_code == 403  # VNC: its own route only
    assert server.http.get(prefix(sandbox_id, 80) + "/").status_code == 422
    assert server.http.post(f"/v1/sandboxes/{sandbox_id}/urls", json={"port": 22}).status_code == 422


def test_tickets_cookies_and_tenancy(server: Server, sandbox_id: str) -> None:
    minted = server.ok(server.http.post(f"/v1/sandboxes/{sandbox_id}/urls", json={"port": STATIC_PORT}))
    assert minted["url"].startswith(server.url + prefix(sandbox_id, STATIC_PORT) + "/?ticket=")
    with httpx.Client(timeout=30, follow_redirects=True) as browser:
        page = browser.get(minted["url"].replace("?", "index.txt?"))
        assert page.status_code == 200 and page.text == "hello-preview\n"
        assert "ticket" not in str(page.url)  # traded for the cookie
        assert browser.get(server.url + prefix(sandbox_id, STATIC_PORT) + "/index.txt").status_code == 200
        # the cookie is scoped to its port's prefix, and bound to it
        assert browser.get(server.url + prefix(sandbox_id, APP_PORT) + "/stream").status_code == 401
        cookie = browser.cookies.get("sandbox_preview")
        assert cookie
    elsewhere = httpx.get(
        server.url + prefix(sandbox_id, APP_PORT) + "/x", cookies={"sandbox_preview": cookie}, timeout=30
    )
    assert elsewhere.status_code == 401
    other_port = httpx.get(server.url + prefix(sandbox_id, APP_PORT) + f"/?ticket={minted['ticket']}", timeout=30)
    assert other_port.status_code == 401
    assert httpx.get(server.url + prefix(sandbox_id, STATIC_PORT) + "/", timeout=30).status_code == 401
    beta = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    assert httpx.get(server.url + prefix(sandbox_id, STATIC_PORT) + "/", headers=beta, timeout=30).status_code == 404
    assert (
        httpx.post(f"{server.url}/v1/sandboxes/{sandbox_id}/urls", json={"port": 8000}, headers=beta).status_code == 404
    )

    short = server.ok(server.http.post(f"/v1/sandboxes/{sandbox_id}/urls", json={"port": STATIC_PORT, "ttl_s": 1}))
    wait_until(lambda: httpx.get(short["url"], timeout=30).status_code == 401, within=10, what="the ticket to expire")
    assert "expired" in httpx.get(short["url"], timeout=30).json()["error"]["message"]


def test_a_download_streams_without_buffering(server: Server, sandbox_id: str) -> None:
    server.exec(sandbox_id, "rm -f /tmp/go")
    url = prefix(sandbox_id, APP_PORT) + "/stream"
    with server.http.stream("GET", url) as response:
        assert response.status_code == 200
        assert response.headers["content-length"] == str(20 * MIB)
        chunks = response.iter_bytes()
        first = b""
        while len(first) < MIB:  # the app holds the rest back until /tmp/go: these came through unbuffered
            first += next(chunks)
        assert set(first[:MIB]) == {ord("a")}
        server.exec(sandbox_id, "touch /tmp/go")
        total = len(first) + sum(len(c) for c in chunks)
    assert total == 20 * MIB


def test_a_websocket_is_relayed(server: Server, sandbox_id: str) -> None:
    ws_url = server.url.replace("http://", "ws://") + prefix(sandbox_id, APP_PORT) + "/ws"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=30) as ws:
        ws.send("hi")
        assert ws.recv(timeout=30) == f"echo:hi prefix={prefix(sandbox_id, APP_PORT)}"
        ws.send("x" * 300)
        assert ws.recv(timeout=30) == "echo:" + "x" * 300 + f" prefix={prefix(sandbox_id, APP_PORT)}"
    minted = server.ok(server.http.post(f"/v1/sandboxes/{sandbox_id}/urls", json={"port": APP_PORT}))
    with connect(ws_url + f"?ticket={minted['ticket']}", open_timeout=30) as ws:
        ws.send("ticket")
        assert str(ws.recv(timeout=30)).startswith("echo:ticket")
