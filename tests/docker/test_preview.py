"""Preview URLs through a real `sandbox server` and a real, network-none terminal sandbox: HTTP, redirects, a
streamed 20 MiB download, a websocket, and who may open them (bearer token, port tickets, their cookie)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.docker.preview_common import (
    APP_PORT,
    CLOSED_PORT,
    MIB,
    OTHER_TOKEN,
    STATIC_PORT,
    TOKEN,
    Server,
    prefix,
    preview_server,
    serving_sandbox,
)
from tests.polling import wait_until

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def server(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real control plane, its containers labelled with this test run's owner."""
    with preview_server(tmp_path_factory.mktemp("preview-server")) as server:
        yield server


@pytest.fixture(scope="module")
def sandbox_id(server: Server) -> Iterator[str]:
    """A network-none terminal sandbox serving /workspace on 8000 (http.server) and the shared app on 8001."""
    with serving_sandbox(server) as sid:
        yield sid


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
