"""``sandbox.url(port)`` through a real `sandbox server` (gRPC) and a real, network-none terminal sandbox: the SDK's URL
(sync and async) and the one `sandbox url ID PORT` prints open the sandbox's ``python3 -m http.server`` from
127.0.0.1, with nothing but the URL; another tenant's SDK and CLI get NotFound. (The proxy itself: test_preview.py.)"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest

from sandbox.client import AsyncClient, Client, Sandbox
from sandbox.errors import NotFound
from tests.conftest import OWNER, RUN_ID, require_image
from tests.docker.servers import SANDBOX_BIN, ServerProcess, started
from tests.polling import wait_until

pytestmark = pytest.mark.docker

TOKEN = "preview-sdk-alpha-0123456789"
OTHER_TOKEN = "preview-sdk-beta-0123456789"
PORT = 8000
PAGE = "hello-from-the-sdk\n"


@pytest.fixture(scope="module")
def server(
    backend: Any, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    require_image(docker_client, "terminal")
    process = ServerProcess(
        tmp_path_factory.mktemp("preview-sdk"),
        owner=OWNER,
        socket_root=f"/run/sbx-test-{RUN_ID}",
        name="preview-sdk",
        tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"},
    )
    with started(process):
        yield process


@pytest.fixture(scope="module")
def sandbox(server: ServerProcess) -> Iterator[Sandbox]:
    """Alpha's network-none terminal sandbox serving /workspace/site with ``python3 -m http.server``."""
    with (
        Client(server.grpc_target, token=TOKEN, timeout=120) as client,
        client.create("terminal", network="none", labels={"test": "preview-sdk"}) as sb,
    ):
        sb.exec(f"mkdir -p /workspace/site && printf '{PAGE}' > /workspace/site/index.txt")
        started_server = sb.exec(
            f"cd /workspace/site && python3 -m http.server {PORT} --bind 127.0.0.1 >/tmp/http.log 2>&1 &",
            keep_background=True,
        )
        assert started_server.ok, started_server
        wait_until(
            lambda: sb.exec(f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {PORT}))\"").ok,
            within=20,
            what="http.server to listen",
        )
        yield sb


def _fetch(url: str) -> httpx.Response:
    """Open ``url`` as a browser would: no token, the ticket traded for the cookie, the redirect followed."""
    with httpx.Client(timeout=30, follow_redirects=True) as browser:
        return browser.get(url)


def _cli(server: ServerProcess, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SANDBOX_BIN, "url", *args], env=server.env(token), capture_output=True, text=True, timeout=60, check=False
    )


def test_the_sdk_url_opens_the_sandboxes_http_server(server: ServerProcess, sandbox: Sandbox) -> None:
    url = sandbox.url(PORT)
    assert url.startswith(f"{server.http_url}/v1/sandboxes/{sandbox.id}/ports/{PORT}/?ticket="), url
    page = _fetch(url.replace("/?ticket=", "/index.txt?ticket="))
    assert page.status_code == 200, page.text
    assert page.text == PAGE and "ticket" not in str(page.url)
    listing = _fetch(sandbox.url(PORT, ttl=60))  # the directory listing at the prefix's root
    assert listing.status_code == 200 and "index.txt" in listing.text
    # urllib on the URL's path, with the bearer token instead of the ticket.
    request = urllib.request.Request(url.split("?", 1)[0] + "index.txt", headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read().decode() == PAGE


async def test_the_async_sdk_has_the_same_url(server: ServerProcess, sandbox: Sandbox) -> None:
    async with AsyncClient(server.grpc_target, token=TOKEN, timeout=60) as client:
        url = await (await client.get(sandbox.id)).url(PORT)
    assert url.startswith(f"{server.http_url}/v1/sandboxes/{sandbox.id}/ports/{PORT}/?ticket=")
    async with httpx.AsyncClient(timeout=30, follow_redirects=True) as browser:
        page = await browser.get(url.replace("/?ticket=", "/index.txt?ticket="))
    assert page.status_code == 200 and page.text == PAGE


def test_the_cli_prints_a_working_url(server: ServerProcess, sandbox: Sandbox) -> None:
    printed = _cli(server, TOKEN, sandbox.id, str(PORT), "--ttl", "120")
    assert printed.returncode == 0, printed.stderr
    url = printed.stdout.strip()
    assert printed.stdout == url + "\n" and url.startswith(f"{server.http_url}/v1/sandboxes/{sandbox.id}/ports/")
    page = _fetch(url.replace("/?ticket=", "/index.txt?ticket="))
    assert page.status_code == 200 and page.text == PAGE
    bad_port = _cli(server, TOKEN, sandbox.id, "80")
    assert bad_port.returncode == 2 and "port" in bad_port.stderr, bad_port.stderr
    missing = _cli(server, TOKEN, "term-" + "0" * 12, str(PORT))
    assert missing.returncode == 1 and "not_found" in missing.stderr, missing.stderr


def test_another_tenant_gets_not_found(server: ServerProcess, sandbox: Sandbox) -> None:
    with Client(server.grpc_target, token=OTHER_TOKEN, timeout=60) as beta:
        with pytest.raises(NotFound):
            beta.get(sandbox.id)
        with pytest.raises(NotFound):
            Sandbox(beta, sandbox.info).url(PORT)  # the id alone opens nothing
    theirs = _cli(server, OTHER_TOKEN, sandbox.id, str(PORT))
    assert theirs.returncode == 1 and "not_found" in theirs.stderr, theirs.stderr
    # Alpha's URL still works for whoever holds it: the ticket is the grant, for that port only.
    other_port = _fetch(sandbox.url(PORT).replace(f"/ports/{PORT}/", "/ports/8001/"))
    assert other_port.status_code == 401
