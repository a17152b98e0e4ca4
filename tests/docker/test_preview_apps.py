"""The full-path form of preview URLs, ``/v1/sandboxes/{id}/apps/{port}/``, through a real `sandbox server` and real,
network-none terminal sandboxes:

- with the shared stdlib app (preview_common): the app gets the whole path, prefix included, and its Location and
  Set-Cookie pass unchanged (the stripping form rewrites the same answer); a websocket gets the whole path too;
  tickets, their cookie (scoped to this form's prefix), 502, another tenant's 404 and another port's 401;
- Jupyter Notebook from the ``terminal-jupyter`` image, started with the minted ``path`` as its ``base_url``, in
  Debian's chromium: the minted URL opens the tree page, the page's own API calls go through the preview cookie,
  and a notebook's kernel runs a cell over the relayed websocket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import docker
import httpx
import pytest
from playwright.sync_api import sync_playwright
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.conftest import require_image
from tests.docker.preview_common import (
    APP_PORT,
    CLOSED_PORT,
    OTHER_TOKEN,
    STATIC_PORT,
    TOKEN,
    Server,
    prefix,
    preview_server,
    serving_sandbox,
)
from tests.docker.test_webview import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.docker

JUPYTER_IMAGE = "sandbox/terminal-jupyter:latest"
JUPYTER_PORT = 8888
BETA = {"Authorization": f"Bearer {OTHER_TOKEN}"}
NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": ["print(6 * 7)"]}
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 4,
}


@pytest.fixture(scope="module")
def server(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with preview_server(tmp_path_factory.mktemp("preview-apps-server")) as server:
        yield server


@pytest.fixture(scope="module")
def sandbox_id(server: Server) -> Iterator[str]:
    """A network-none terminal sandbox serving http.server on 8000 and the shared app on 8001."""
    with serving_sandbox(server) as sid:
        yield sid


def test_the_app_gets_the_whole_path_and_its_headers_unchanged(server: Server, sandbox_id: str) -> None:
    apps = prefix(sandbox_id, APP_PORT, form="apps")
    got = server.ok(server.http.get(f"{apps}/deep/echo?q=a%20b&x=1"))
    assert got == {"path": f"{apps}/deep/echo?q=a%20b&x=1", "prefix": apps, "cookie": None}
    assert server.ok(server.http.get(f"{apps}/a%2Fb/echo"))["path"] == f"{apps}/a%2Fb/echo"  # as the caller encoded it
    moved = server.http.get(f"{apps}/redirect")
    assert moved.status_code == 302, moved.text
    assert moved.headers["location"] == "/elsewhere/x"
    assert moved.headers.get_list("set-cookie") == ["app=1; Path=/", "deep=2; Path=/deep"]
    # The stripping form, on the same app: the path after the prefix, and the same answer moved into the prefix.
    ports = prefix(sandbox_id, APP_PORT)
    assert server.ok(server.http.get(f"{ports}/deep/echo"))["path"] == "/deep/echo"
    stripped = server.http.get(f"{ports}/redirect")
    assert stripped.headers["location"] == f"{ports}/elsewhere/x"
    assert stripped.headers.get_list("set-cookie") == [f"app=1; Path={ports}/", f"deep=2; Path={ports}/deep"]
    # http.server, which knows no base path, has no /v1/... file: the prefix did reach it.
    static = prefix(sandbox_id, STATIC_PORT, form="apps")
    assert server.http.get(f"{static}/index.txt").status_code == 404
    bare = server.http.get(apps)  # the prefix itself: on to the slash, like the stripping form
    assert bare.status_code == 308 and bare.headers["location"] == apps + "/"


def test_a_closed_port_is_502_and_platform_ports_are_refused(server: Server, sandbox_id: str) -> None:
    closed = server.http.get(prefix(sandbox_id, CLOSED_PORT, form="apps") + "/")
    assert closed.status_code == 502 and f"port {CLOSED_PORT}" in closed.json()["error"]["message"]
    assert server.http.get(prefix(sandbox_id, 5900, form="apps") + "/").status_code == 403
    assert server.http.get(prefix(sandbox_id, 80, form="apps") + "/").status_code == 422


def test_tickets_cookies_and_tenancy(server: Server, sandbox_id: str) -> None:
    apps = prefix(sandbox_id, APP_PORT, form="apps")
    minted = server.mint(sandbox_id, APP_PORT, full_path=True)
    assert minted["path"] == apps + "/"
    assert minted["url"] == f"{server.url}{apps}/?ticket={minted['ticket']}"
    with httpx.Client(timeout=30) as browser:
        redeemed = browser.get(minted["url"].replace("/?", "/echo?"))
        assert redeemed.status_code == 303 and redeemed.headers["location"] == f"{apps}/echo"
        assert (
            f"Path={apps}/" in redeemed.headers["set-cookie"] and "httponly" in redeemed.headers["set-cookie"].lower()
        )
        got = browser.get(f"{server.url}{apps}/echo")  # the cookie, which the app never sees
        assert got.status_code == 200 and got.json() == {"path": f"{apps}/echo", "prefix": apps, "cookie": None}
        cookie = browser.cookies.get("sandbox_preview")
        assert cookie
        # Scoped to this form's prefix: the stripping form's path gets no cookie from the jar.
        assert browser.get(f"{server.url}{prefix(sandbox_id, APP_PORT)}/echo").status_code == 401
    other_port = prefix(sandbox_id, STATIC_PORT, form="apps")
    assert httpx.get(f"{server.url}{other_port}/", cookies={"sandbox_preview": cookie}, timeout=30).status_code == 401
    assert httpx.get(f"{server.url}{other_port}/?ticket={minted['ticket']}", timeout=30).status_code == 401
    assert httpx.get(f"{server.url}{apps}/echo", timeout=30).status_code == 401  # nothing at all
    # A ticket is bound to the sandbox and the port, not the form: the stripping form's opens this one too.
    plain = server.mint(sandbox_id, APP_PORT)
    assert plain["path"] == prefix(sandbox_id, APP_PORT) + "/"
    with httpx.Client(timeout=30, follow_redirects=True) as browser:
        page = browser.get(f"{server.url}{apps}/echo?ticket={plain['ticket']}")
        assert page.status_code == 200 and page.json()["path"] == f"{apps}/echo"
    assert httpx.get(f"{server.url}{apps}/echo", headers=BETA, timeout=30).status_code == 404
    theirs = httpx.post(f"{server.url}/v1/sandboxes/{sandbox_id}/urls", json={"port": APP_PORT, "full_path": True},
                        headers=BETA, timeout=30)  # fmt: skip
    assert theirs.status_code == 404


def test_a_websocket_gets_the_whole_path(server: Server, sandbox_id: str) -> None:
    apps = prefix(sandbox_id, APP_PORT, form="apps")
    ws_url = server.url.replace("http://", "ws://") + apps + "/ws"
    with connect(ws_url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, open_timeout=30) as ws:
        ws.send("path")
        assert ws.recv(timeout=30) == f"{apps}/ws"
        ws.send("host")  # the control plane's, once (an app checking Origin against Host needs it so)
        assert ws.recv(timeout=30) == urlsplit(server.url).netloc
        ws.send("hi")
        assert ws.recv(timeout=30) == f"echo:hi prefix={apps}"
    minted = server.mint(sandbox_id, APP_PORT, full_path=True)
    with connect(f"{ws_url}?x=1&ticket={minted['ticket']}", open_timeout=30) as ws:
        ws.send("ticket")
        assert ws.recv(timeout=30) == f"echo:ticket prefix={apps}"
        ws.send("path")  # the ticket is the proxy's: the app never sees it
        assert ws.recv(timeout=30) == f"{apps}/ws?x=1"
    with pytest.raises(InvalidStatus), connect(ws_url, additional_headers=BETA, open_timeout=30):
        pass


# --------------------------------------------------------------------------- Jupyter, in chromium


@pytest.fixture(scope="module")
def jupyter(server: Server, docker_client: docker.DockerClient) -> Iterator[tuple[str, dict[str, Any]]]:
    """A network-none sandbox of the terminal-jupyter image running Jupyter Notebook with the minted full path as its
    base_url, no token, no password; yields its id and the minted URL."""
    require_image(docker_client, "terminal-jupyter")
    spec = {"kind": "terminal", "image": JUPYTER_IMAGE, "network": "none", "labels": {"test": "preview-apps"}}
    info = server.ok(server.http.post("/v1/sandboxes", json=spec))
    try:
        sid = info["id"]
        minted = server.mint(sid, JUPYTER_PORT, full_path=True, ttl_s=600)
        server.exec(sid, "cat > /workspace/hello.ipynb <<'EOF'\n" + json.dumps(NOTEBOOK) + "\nEOF")
        server.exec(
            sid,
            f"jupyter notebook --no-browser --ip=127.0.0.1 --port={JUPYTER_PORT} --notebook-dir=/workspace"
            f" --NotebookApp.base_url={minted['path']} --NotebookApp.token='' --NotebookApp.password=''"
            " --NotebookApp.allow_remote_access=True >/tmp/jupyter.log 2>&1 &",
            keep_background=True,
        )
        try:
            server.wait_listening(sid, {JUPYTER_PORT}, within=90)
            yield sid, minted
        finally:
            print(server.exec(sid, "tail -n 40 /tmp/jupyter.log")["stdout"])  # shown when a test failed
    finally:
        server.http.delete(f"/v1/sandboxes/{info['id']}")


def test_jupyter_behind_the_full_path_form_in_chromium(server: Server, jupyter: tuple[str, dict[str, Any]]) -> None:
    sid, minted = jupyter
    base = minted["path"]
    assert base == f"/v1/sandboxes/{sid}/apps/{JUPYTER_PORT}/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context().new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))

            def listing(response: Any) -> bool:
                return bool(urlsplit(response.url).path == base + "api/contents")

            # The minted URL: the ticket traded for the cookie, then Jupyter's own redirect to its tree page.
            with page.expect_response(listing, timeout=60_000) as listed:
                page.goto(minted["url"], timeout=60_000)
            assert urlsplit(page.url).path == base + "tree" and "ticket" not in page.url, page.url
            assert page.title() == "Home Page - Select or create a notebook"
            assert listed.value.status == 200
            assert "hello.ipynb" in {item["name"] for item in listed.value.json()["content"]}
            page.wait_for_selector("#notebook_list .item_link:has-text('hello.ipynb')", timeout=30_000)
            # An API call from the page: the preview cookie opens it, no Jupyter token.
            status, kind = page.evaluate(
                "async (url) => { const r = await fetch(url); return [r.status, (await r.json()).type]; }",
                base + "api/contents/hello.ipynb",
            )
            assert (status, kind) == (200, "notebook")

            # A notebook: its kernel's websocket goes through the relay, and a cell runs.
            page.goto(server.url + base + "notebooks/hello.ipynb", timeout=60_000)
            page.wait_for_function(
                "() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                " && Jupyter.notebook.kernel.is_connected()",
                timeout=90_000,
            )
            page.evaluate("() => Jupyter.notebook.execute_all_cells()")
            page.wait_for_selector(".output_area pre:has-text('42')", timeout=60_000)
            assert not errors, f"the pages raised: {errors}"
        finally:
            browser.close()
