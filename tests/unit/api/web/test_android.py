"""The web view of an android sandbox (no VNC server in it): the page is told to show screenshots, which its ticket
fetches, and a control ticket sends taps, swipes and keys as steps; a view-only ticket and another tenant cannot.
In-process: the REST skin, the fake backend, the real agent (``--kind android``) and Debian's adb client against the
fake adb server of test_android_api."""

from __future__ import annotations

import httpx

from sandbox.api.web.screens import live_view
from sandbox.client import AsyncSandbox
from sandbox.models import SandboxKind
from tests.unit.android.test_api import Device, device, device_commands, phone, terminal  # noqa: F401
from tests.unit.android_fakes import FakeAdbServer, FakeConsole
from tests.unit.conftest import ALPHA, BETA

JPEG = b"\xff\xd8"


async def ticket(api: httpx.AsyncClient, sandbox_id: str, *, control: bool, token: dict[str, str] = ALPHA) -> str:
    response = await api.post(f"/v1/sandboxes/{sandbox_id}/tickets", json={"control": control}, headers=token)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["ticket"])


def test_which_kinds_show_vnc_screenshots_or_nothing() -> None:
    assert {k: live_view(k) for k in SandboxKind} == {
        SandboxKind.DESKTOP: "vnc",
        SandboxKind.BROWSER: "vnc",
        SandboxKind.ANDROID: "screenshots",
        SandboxKind.TERMINAL: "none",
    }


async def test_an_android_page_shows_screenshots_and_a_control_ticket_taps(
    api: httpx.AsyncClient,
    phone: AsyncSandbox,  # noqa: F811
    terminal: AsyncSandbox,  # noqa: F811
    device: tuple[FakeAdbServer, FakeConsole, Device],  # noqa: F811
) -> None:
    server = device[0]
    watch = {"X-Sandbox-Ticket": await ticket(api, phone.id, control=False)}
    feed = (await api.get(f"/view/{phone.id}/actions", headers=watch)).json()
    assert feed["sandbox"]["live"] == "screenshots" and feed["grant"]["control"] is False
    shot = await api.get(f"/view/{phone.id}/screen", headers=watch)
    assert shot.status_code == 200 and shot.headers["content-type"] == "image/jpeg", shot.text
    assert shot.content.startswith(JPEG)

    since = len(server.commands)
    refused = await api.post(f"/view/{phone.id}/input", json={"type": "tap", "x": 10, "y": 20}, headers=watch)
    assert refused.status_code == 403 and "view-only" in refused.text
    assert device_commands(server, since) == []

    drive = {"X-Sandbox-Ticket": await ticket(api, phone.id, control=True)}
    for action in ({"type": "tap", "x": 10, "y": 20}, {"type": "swipe", "x": 5, "y": 6, "to_x": 50, "to_y": 60},
                   {"type": "key", "key": "back"}):  # fmt: skip
        sent = await api.post(f"/view/{phone.id}/input", json=action, headers=drive)
        assert sent.status_code == 200 and sent.json()["ok"] is True, sent.text
    commands = device_commands(server, since)
    assert commands[0] == "input tap 10 20" and commands[1].startswith("input swipe 5 6 50 60"), commands
    assert any("KEYCODE_BACK" in c for c in server.commands[since:]), server.commands[since:]
    actions = (await api.get(f"/view/{phone.id}/actions", headers=drive)).json()["actions"]
    assert [a["action"]["type"] for a in actions[-3:]] == ["tap", "swipe", "key"]  # steps like any other

    bad = await api.post(f"/view/{phone.id}/input", json={"type": "exec", "cmd": "id"}, headers=drive)
    assert bad.status_code in (400, 422) and "tap, swipe, key, type_text" in bad.text

    other = await api.post(f"/v1/sandboxes/{phone.id}/tickets", json={"control": True}, headers=BETA)
    assert other.status_code == 404
    foreign = {"X-Sandbox-Ticket": await ticket(api, terminal.id, control=True)}
    assert (await api.get(f"/view/{phone.id}/screen", headers=foreign)).status_code == 401  # bound to its sandbox
    plain = (await api.get(f"/view/{terminal.id}/actions", headers=foreign)).json()
    assert plain["sandbox"]["live"] == "none"
