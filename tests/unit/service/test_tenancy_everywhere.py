"""No cross-tenant access through any route: every REST route and every gRPC method that names a sandbox (found by
walking the app's routes and the service descriptor, so a route added later is covered without editing this file)
answers another tenant's sandbox exactly as it answers an id that does not exist, and changes nothing in it. The web
view: another tenant gets no ticket and no VNC websocket, and its session lists nothing of the first tenant's."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
import pytest_asyncio
from fastapi.routing import APIRoute, APIWebSocketRoute
from starlette.routing import WebSocketRoute

from sandbox.api.rest import create_app
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.service import SandboxService, TokenRegistry
from sandbox.wire.grpc_gen import sandbox_pb2 as pb
from tests.unit.conftest import ALPHA, BETA, BETA_TOKEN, TOKENS

LOGGER = logging.getLogger("sandbox.test.tenancy")
SERVICE = pb.DESCRIPTOR.services_by_name["SandboxService"]
BETA_METADATA = (("authorization", f"Bearer {BETA_TOKEN}"),)

# A body each route accepts, so that what answers is the tenancy check and not body validation. A route that needs a
# body and is missing here fails the test (422), asking for one.
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/step"): {"json": {"action": {"type": "exec", "cmd": "touch /workspace/stolen"}}},
    ("POST", "/exec"): {"json": {"cmd": "touch /workspace/stolen"}},
    ("POST", "/snapshots"): {"json": {"name": "stolen"}},
    ("POST", "/tickets"): {"json": {"control": True}},
    ("POST", "/urls"): {"json": {"port": 8000}},
    ("PUT", "/files/content"): {"content": b"stolen"},
}


@pytest_asyncio.fixture(scope="module")
async def app_and_api(service: SandboxService) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    app = create_app(service, TokenRegistry.from_mapping(TOKENS), logger=LOGGER)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
        yield app, client


@pytest_asyncio.fixture
async def theirs(alpha: AsyncClient) -> AsyncIterator[AsyncSandbox]:
    async with await alpha.create("terminal", labels={"test": "tenancy"}) as sb:
        yield sb


def _sandbox_routes(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) naming a sandbox: the OpenAPI schema's (the included routers) and the app's own routes
    (the web view's, which stay out of the schema)."""
    found = {
        (method.upper(), path)
        for path, operations in app.openapi()["paths"].items()
        for method in operations
        if "{sandbox_id}" in path
    }
    for route in app.routes:
        if isinstance(route, APIRoute) and "{sandbox_id}" in route.path:
            found |= {(method, route.path) for method in (route.methods or set()) - {"HEAD"}}
    return sorted(found)


async def test_every_rest_route_hides_another_tenants_sandbox(
    app_and_api: tuple[Any, httpx.AsyncClient], theirs: AsyncSandbox
) -> None:
    app, api = app_and_api
    routes = _sandbox_routes(app)
    assert len(routes) >= 20, routes  # the walk found the API, not an empty router
    missing = "term-" + "0" * (len(theirs.id) - 5)
    for method, template in routes:
        suffix = template.split("{sandbox_id}", 1)[1]
        options = {"params": {"path": "x"}, **BODIES.get((method, suffix), {})}
        if method in ("POST", "PUT") and "json" not in options and "content" not in options:
            options["json"] = {}
        answers = []
        for sandbox_id in (theirs.id, missing):
            path = template.replace("{sandbox_id}", sandbox_id)
            if "{" in path:  # a second parameter (a view's sub-resource): any value, the sandbox is checked first
                path = path.split("{", 1)[0] + "x"
            answers.append(await api.request(method, path, headers=BETA, **options))
        mine, nobodys = answers
        assert mine.status_code in (401, 404), (method, template, mine.status_code, mine.text)
        assert (mine.status_code, mine.text.replace(theirs.id, "ID")) == (
            nobodys.status_code,
            nobodys.text.replace(missing, "ID"),
        ), (method, template)
    # Beta's attempts changed nothing in alpha's sandbox.
    assert (await theirs.exec("ls -A /workspace")).stdout == ""
    info = (await api.get(f"/v1/sandboxes/{theirs.id}", headers=ALPHA)).json()
    assert info["state"] == "running" and info["tenant"] == "alpha"


def _request_for(method: Any, sandbox_id: str) -> bytes:
    request = getattr(pb, method.input_type.name)()
    request.sandbox_id = sandbox_id
    if "path" in method.input_type.fields_by_name:
        request.path = "stolen"
    if method.input_type.name == "StepRequest":
        request.action.exec.shell = "touch /workspace/stolen"
    if method.input_type.name == "ExecRequest":
        request.exec.shell = "touch /workspace/stolen"
    if method.input_type.name == "WriteFileRequest":
        request.data = b"stolen"
    if method.input_type.name == "CreateSnapshotRequest":
        request.name = "stolen"
    if method.input_type.name == "PreviewUrlRequest":
        request.port = 8000
    return bytes(request.SerializeToString())


async def test_every_grpc_method_hides_another_tenants_sandbox(target: str, theirs: AsyncSandbox) -> None:
    methods = [m for m in SERVICE.methods if "sandbox_id" in m.input_type.fields_by_name]
    assert len(methods) >= 15, [m.name for m in methods]
    missing = "term-" + "0" * (len(theirs.id) - 5)
    async with grpc.aio.insecure_channel(target) as channel:
        for method in methods:
            path = f"/{SERVICE.full_name}/{method.name}"
            codes = []
            for sandbox_id in (theirs.id, missing):
                if method.client_streaming:
                    stream = channel.stream_stream(path)(metadata=BETA_METADATA, timeout=10)
                    await stream.write(_request_for(method, sandbox_id))
                    answer = pb.StepResponse.FromString(await stream.read())
                    await stream.done_writing()
                    codes.append((answer.error.code, answer.error.message.replace(sandbox_id, "ID")))
                    continue
                with pytest.raises(grpc.aio.AioRpcError) as failed:
                    await channel.unary_unary(path)(
                        _request_for(method, sandbox_id), metadata=BETA_METADATA, timeout=10
                    )
                codes.append((failed.value.code().value[0], str(failed.value.details()).replace(sandbox_id, "ID")))
            assert codes[0][0] == grpc.StatusCode.NOT_FOUND.value[0], (method.name, codes)
            assert codes[0] == codes[1], (method.name, codes)
    assert (await theirs.exec("ls -A /workspace")).stdout == ""


async def test_the_web_view_gives_another_tenant_nothing(
    app_and_api: tuple[Any, httpx.AsyncClient], theirs: AsyncSandbox
) -> None:
    app, api = app_and_api
    # No ticket for beta: the only way into the view page, its feeds and its VNC websocket.
    refused = await api.post(f"/v1/sandboxes/{theirs.id}/tickets", json={"control": False}, headers=BETA)
    assert refused.status_code == 404
    alpha_ticket = (await api.post(f"/v1/sandboxes/{theirs.id}/tickets", json={}, headers=ALPHA)).json()["ticket"]
    # Beta's token is no ticket, and beta's session lists none of alpha's sandboxes.
    page = await api.get(f"/view/{theirs.id}", params={"ticket": BETA_TOKEN})
    assert page.status_code == 401
    login = await api.get("/view", params={"token": BETA_TOKEN}, follow_redirects=False)
    assert login.status_code == 303, login.text
    cookies = {"cookie": "; ".join(f"{name}={value}" for name, value in login.cookies.items())}
    listing = await api.get("/view/api/sandboxes", headers=cookies)
    assert listing.status_code == 200 and listing.json()["tenant"] == "beta", listing.text
    assert theirs.id not in listing.text
    missing = "term-" + "0" * (len(theirs.id) - 5)
    thumbs = [await api.get(f"/view/api/sandboxes/{i}/thumbnail", headers=cookies) for i in (theirs.id, missing)]
    assert thumbs[0].status_code == 404 == thumbs[1].status_code, [t.text for t in thumbs]
    assert thumbs[0].text.replace(theirs.id, "ID") == thumbs[1].text.replace(missing, "ID")
    # Every websocket route of the view is guarded by a ticket (exercised in tests/docker/test_webview.py).
    sockets = [r.path for r in app.routes if isinstance(r, (WebSocketRoute, APIWebSocketRoute))]
    assert sockets and all("{sandbox_id}" in p for p in sockets), sockets
    # Alpha's own ticket still works: the refusals above are about the tenant, not a broken view.
    assert (await api.get(f"/view/{theirs.id}/actions", params={"ticket": alpha_ticket})).status_code == 200
