"""What the preview tests share (test_preview.py: the prefix-stripping form, test_preview_apps.py: the full-path
form): a real `sandbox server` with two tenants, a REST helper, and a network-none terminal sandbox serving
``python3 -m http.server`` on one port and the stdlib app below on another."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import OWNER, RUN_ID
from tests.docker.servers import ServerProcess, started
from tests.polling import wait_until

TOKEN = "preview-alpha-token-0123456789"
OTHER_TOKEN = "preview-beta-token-0123456789"
STATIC_PORT, APP_PORT, CLOSED_PORT = 8000, 8001, 8009
MIB = 1 << 20

# A stdlib app for the sandbox (no websockets package in the terminal image). By the path's last segment, whatever
# comes before it (so it answers under either form's path):
# - /ws: echoes websocket text messages as "echo:<text> prefix=<X-Forwarded-Prefix>", and answers the message
#   "path" with the request target it got, "host" with its Host headers (a minimal RFC 6455 server);
# - /echo: the request target, X-Forwarded-Prefix and Cookie it got, as JSON;
# - /redirect: a 302 to /elsewhere/x that sets the cookies app=1 (Path=/) and deep=2 (Path=/deep);
# - anything else: writes 1 MiB, waits for /tmp/go, then 19 MiB more.
APP = r"""
import asyncio, base64, hashlib, json, os, struct
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
async def handle(r, w):
    head = await r.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    path = lines[0].split()[1]
    last = path.split("?", 1)[0].rsplit("/", 1)[-1]
    hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    hosts = " | ".join(l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("host:"))
    if last == "ws":
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
            out = (path if data == b"path" else hosts if data == b"host" else
                   "echo:" + data.decode() + " prefix=" + hdrs.get("x-forwarded-prefix", "")).encode()
            w.write(bytes([0x81, 126]) + struct.pack(">H", len(out)) + out if len(out) > 125
                    else bytes([0x81, len(out)]) + out)
            await w.drain()
    if last in ("echo", "redirect"):
        body = json.dumps({"path": path, "prefix": hdrs.get("x-forwarded-prefix"), "cookie": hdrs.get("cookie")})
        status = b"200 OK" if last == "echo" else b"302 Found"
        extra = b"" if last == "echo" else (b"Location: /elsewhere/x\r\nSet-Cookie: app=1; Path=/\r\n"
                                            b"Set-Cookie: deep=2; Path=/deep\r\n")
        w.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                % len(body) + extra + b"Connection: close\r\n\r\n" + body.encode())
        await w.drain(); w.close(); return
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


def prefix(sandbox_id: str, port: int, *, form: str = "ports") -> str:
    """A preview's path prefix, no trailing slash: the ``ports`` form (stripped) or the ``apps`` one (full path)."""
    return f"/v1/sandboxes/{sandbox_id}/{form}/{port}"


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

    def mint(self, sandbox_id: str, port: int, **body: Any) -> dict[str, Any]:
        """``POST /v1/sandboxes/{id}/urls``: a preview URL of ``port`` (``ttl_s``, ``full_path``)."""
        return dict(self.ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/urls", json={"port": port, **body})))

    def wait_listening(self, sandbox_id: str, ports: set[int], *, within: float = 20) -> None:
        def listening() -> bool:
            found = self.ok(self.http.get(f"/v1/sandboxes/{sandbox_id}/ports"))
            return ports <= {p["port"] for p in found if p["previewable"]}

        wait_until(listening, within=within, what=f"the sandbox's servers to listen on {sorted(ports)}")


@contextlib.contextmanager
def preview_server(workdir: Path) -> Iterator[Server]:
    """A real control plane with tenants alpha (TOKEN) and beta (OTHER_TOKEN), its containers labelled with this
    test run's owner."""
    process = ServerProcess(
        workdir, owner=OWNER, socket_root=f"/run/sbx-test-{RUN_ID}", tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"}
    )
    with started(process):
        server = Server(process.http_url)
        try:
            yield server
        finally:
            server.http.close()


@contextlib.contextmanager
def serving_sandbox(server: Server) -> Iterator[str]:
    """Alpha's network-none terminal sandbox serving /workspace/site on STATIC_PORT (http.server) and APP on
    APP_PORT; deleted at the end."""
    info = server.ok(server.http.post("/v1/sandboxes", json={"kind": "terminal", "network": "none"}))
    try:
        assert info["spec"]["network"] == "none"
        sid = info["id"]
        server.exec(sid, "mkdir -p /workspace/site/sub && echo hello-preview > /workspace/site/index.txt")
        server.exec(sid, "cat > /tmp/app.py <<'EOF'\n" + APP + "\nEOF")
        server.exec(sid, f"cd /workspace/site && python3 -m http.server {STATIC_PORT} --bind 127.0.0.1 "
                         ">/tmp/static.log 2>&1 &", keep_background=True)  # fmt: skip
        server.exec(sid, "python3 /tmp/app.py >/tmp/app.log 2>&1 &", keep_background=True)
        server.wait_listening(sid, {STATIC_PORT, APP_PORT})
        yield sid
    finally:
        server.http.delete(f"/v1/sandboxes/{info['id']}")
