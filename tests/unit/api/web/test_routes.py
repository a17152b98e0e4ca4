"""The web view's routes in-process (ASGI) over the fake backend: who gets a ticket, what a ticket and a
session open. The browser, the VNC view and real desktops are in tests/docker/test_webview.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest_asyncio

from sandbox.api.rest import create_app
from sandbox.service import SandboxService, TokenRegistry
from sandbox.service.tickets import TicketIssuer
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, BETA, BETA_TOKEN, LOGGER, TOKENS


@pytest_asyncio.fixture(scope="module")
async def api(service: SandboxService) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(service, TokenRegistry.from_mapping(TOKENS), logger=LOGGER, tickets=TicketIssuer(ttl_s=30))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
        yield client


@pytest_asyncio.fixture(scope="module")
async def sandbox(api: httpx.AsyncClient) -> AsyncIterator[str]:
    r = await api.post("/v1/sandboxes", json={"kind": "terminal"}, headers=ALPHA)
    assert r.status_code == 201, r.text
    yield str(r.json()["id"])
    await api.delete(f"/v1/sandboxes/{r.json()['id']}", headers=ALPHA)


async def test_a_ticket_goes_only_to_a_token_holder_who_sees_the_sandbox(api: httpx.AsyncClient, sandbox: str) -> None:
    r = await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={"control": True}, headers=ALPHA)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["url"] == f"/view/{sandbox}?ticket={body['ticket']}" and body["expires_at"] > 0
    assert (await api.post(f"/v1/sandboxes/{sandbox}/tickets", headers=ALPHA)).status_code == 201  # body optional
    assert (await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={}, headers=BETA)).status_code == 404
    assert (await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={})).status_code == 401
    r = await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={}, headers={"Authorization": "Basic x"})
    assert r.status_code == 401 and "Bearer" in r.json()["error"]["message"]


async def test_a_ticket_opens_its_sandbox_page_feed_and_renewal(api: httpx.AsyncClient, sandbox: str) -> None:
    await api.post(f"/v1/sandboxes/{sandbox}/step", json={"action": {"type": "exec", "cmd": "true"}}, headers=ALPHA)
    ticket = (await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={}, headers=ALPHA)).json()["ticket"]
    page = await api.get(f"/view/{sandbox}", params={"ticket": ticket})
    assert page.status_code == 200 and "sandbox.js" in page.text
    feed = (await api.get(f"/view/{sandbox}/actions", headers={"X-Sandbox-Ticket": ticket})).json()
    assert feed["sandbox"]["id"] == sandbox and feed["grant"]["control"] is False
    assert [a["action"]["type"] for a in feed["actions"]] == ["exec"]
    assert (await api.get(f"/view/{sandbox}/logs", params={"ticket": ticket})).status_code == 200
    renewed = (await api.post(f"/view/{sandbox}/renew", headers={"X-Sandbox-Ticket": ticket})).json()
    assert renewed["ticket"] != ticket and renewed["expires_at"] >= feed["grant"]["expires_at"]


async def test_no_bad_or_foreign_ticket_opens_nothing(api: httpx.AsyncClient, sandbox: str) -> None:
    other = (await api.post("/v1/sandboxes", json={"kind": "terminal"}, headers=ALPHA)).json()["id"]
    try:
        foreign = (await api.post(f"/v1/sandboxes/{other}/tickets", json={}, headers=ALPHA)).json()["ticket"]
        for ticket in (None, "bad.ticket", foreign):
            params = {"ticket": ticket} if ticket else {}
            page = await api.get(f"/view/{sandbox}", params=params)
            assert page.status_code == 401 and "This view cannot be opened" in page.text
            for path in ("actions", "logs"):
                assert (await api.get(f"/view/{sandbox}/{path}", params=params)).status_code == 401
            assert (await api.post(f"/view/{sandbox}/renew", params=params)).status_code == 401
        page = await api.get(f"/view/{sandbox}", params={"ticket": '"><script>x</script>'})
        assert "<script>x" not in page.text
    finally:
        await api.delete(f"/v1/sandboxes/{other}", headers=ALPHA)
    gone = await api.get(f"/view/{other}", params={"ticket": foreign})
    assert gone.status_code == 404  # a ticket outlives no sandbox


async def test_the_list_session_lives_in_an_httponly_cookie(api: httpx.AsyncClient, sandbox: str) -> None:
    assert (await api.get("/view")).status_code == 401  # the sign-in form
    assert (await api.get("/view/api/sandboxes")).status_code == 401
    assert (await api.get("/view", params={"token": "not-a-token"})).status_code == 401
    r = await api.get("/view", params={"token": ALPHA_TOKEN})
    assert r.status_code == 303 and r.headers["location"] == "/view"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/view" in cookie
    assert ALPHA_TOKEN not in cookie
    session = {"Cookie": cookie.split(";")[0]}
    assert (await api.get("/view", headers=session)).status_code == 200
    listed = (await api.get("/view/api/sandboxes", headers=session)).json()
    assert listed["tenant"] == "alpha" and sandbox in [s["id"] for s in listed["sandboxes"]]
    entry = next(s for s in listed["sandboxes"] if s["id"] == sandbox)
    assert entry["kind"] == "terminal" and entry["has_display"] is False and "ok" in entry["health"]
    capacity = listed["capacity"]  # the fake reports no host size: only quotas are checked
    assert capacity["bounded"] is False and capacity["free"] is None and capacity["fits_now"] == {}
    assert [row["tenant"] for row in capacity["tenants"]] == ["alpha"]
    r = await api.get(f"/view/{sandbox}", params={"control": "1"}, headers=session)
    assert r.status_code == 303 and r.headers["location"].startswith(f"/view/{sandbox}?ticket=")
    ticket = r.headers["location"].split("ticket=", 1)[1]
    feed = (await api.get(f"/view/{sandbox}/actions", params={"ticket": ticket})).json()
    assert feed["grant"]["control"] is True
    # a terminal has no screen to show
    assert (await api.get(f"/view/api/sandboxes/{sandbox}/thumbnail", headers=session)).status_code == 409
    beta = await api.get("/view", params={"token": BETA_TOKEN})
    beta_session = {"Cookie": beta.headers["set-cookie"].split(";")[0]}
    assert (await api.get(f"/view/{sandbox}", headers=beta_session)).status_code == 404
    assert (await api.get("/view/logout", headers=session)).headers["set-cookie"].startswith("sandbox_view_session=")


async def test_static_files_and_novnc_are_served(api: httpx.AsyncClient) -> None:
    assert (await api.get("/view/static/sandbox.js")).status_code == 200
    rfb = await api.get("/view/novnc/core/rfb.js")
    assert rfb.status_code == 200 and "export default class RFB" in rfb.text
    assert (await api.get("/view/novnc/vendor/pako/lib/zlib/inflate.js")).status_code == 200
    assert (await api.get("/view/novnc/vnc.html")).status_code == 404


async def test_the_list_feed_searches_filters_and_pages(api: httpx.AsyncClient, sandbox: str) -> None:
    made = []
    for n in range(5):
        r = await api.post("/v1/sandboxes", json={"kind": "terminal", "labels": {"job": f"fleet-{n}"}}, headers=ALPHA)
        made.append(r.json()["id"])
    try:
        session = {
            "Cookie": (await api.get("/view", params={"token": ALPHA_TOKEN})).headers["set-cookie"].split(";")[0]
        }
        feed = (await api.get("/view/api/sandboxes", params={"limit": 2}, headers=session)).json()
        assert feed["total"] >= 6 and feed["matched"] == feed["total"] and len(feed["sandboxes"]) == 2
        assert [s["id"] for s in feed["sandboxes"]] == made[::-1][:2]  # newest first
        rest = (await api.get("/view/api/sandboxes", params={"limit": 2, "offset": 2}, headers=session)).json()
        assert [s["id"] for s in rest["sandboxes"]] == made[::-1][2:4]
        one = (await api.get("/view/api/sandboxes", params={"q": "job=fleet-3"}, headers=session)).json()
        assert [s["id"] for s in one["sandboxes"]] == [made[3]] and one["sandboxes"][0]["labels"] == {"job": "fleet-3"}
        by_id = (await api.get("/view/api/sandboxes", params={"q": made[1][-6:]}, headers=session)).json()
        assert [s["id"] for s in by_id["sandboxes"]] == [made[1]]
        assert (await api.get("/view/api/sandboxes", params={"kind": "desktop"}, headers=session)).json()[
            "matched"
        ] == 0
        assert (await api.get("/view/api/sandboxes", params={"state": "nope"}, headers=session)).status_code == 422
        assert (await api.get("/view/api/sandboxes", params={"limit": 0}, headers=session)).status_code == 422
        # the output tail: on the card, and its own feed
        await api.post(f"/v1/sandboxes/{made[0]}/exec", json={"cmd": "echo one; echo two; exit 2"}, headers=ALPHA)
        card = (await api.get("/view/api/sandboxes", params={"q": made[0]}, headers=session)).json()["sandboxes"][0]
        assert card["output"] == ["$ echo one; echo two; exit 2", "one", "two", "[exit 2]"]
        out = (await api.get(f"/view/api/sandboxes/{made[0]}/output", headers=session)).json()
        assert out["lines"] == card["output"]
        # tenancy: beta sees none of alpha's, not even by search, nor their output
        beta = await api.get("/view", params={"token": BETA_TOKEN})
        beta_session = {"Cookie": beta.headers["set-cookie"].split(";")[0]}
        theirs = (await api.get("/view/api/sandboxes", params={"q": made[0]}, headers=beta_session)).json()
        assert theirs["matched"] == 0 and theirs["sandboxes"] == [] and made[0] not in str(theirs["counts"])
        assert (await api.get(f"/view/api/sandboxes/{made[0]}/output", headers=beta_session)).status_code == 404
    finally:
        for sandbox_id in made:
            await api.delete(f"/v1/sandboxes/{sandbox_id}", headers=ALPHA)


async def test_the_page_lists_ports_and_links_them_for_a_control_ticket(api: httpx.AsyncClient, sandbox: str) -> None:
    view = (await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={}, headers=ALPHA)).json()["ticket"]
    control = (await api.post(f"/v1/sandboxes/{sandbox}/tickets", json={"control": True}, headers=ALPHA)).json()
    listed = (await api.get(f"/view/{sandbox}/ports", headers={"X-Sandbox-Ticket": view})).json()
    assert listed["links"] is False and all(p["url"] is None for p in listed["ports"])
    linked = (await api.get(f"/view/{sandbox}/ports", headers={"X-Sandbox-Ticket": control["ticket"]})).json()
    assert linked["links"] is True
    for port in linked["ports"]:
        if port["previewable"]:
            assert port["url"].startswith(f"/v1/sandboxes/{sandbox}/ports/{port['port']}/?ticket=")
    assert (await api.get(f"/view/{sandbox}/ports")).status_code == 401
    out = await api.get(f"/view/{sandbox}/output", headers={"X-Sandbox-Ticket": view})
    assert out.status_code == 200 and isinstance(out.json()["lines"], list)
