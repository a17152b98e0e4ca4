"""The REST skin, driven in-process (ASGI) over a service on the fake backend (real agents as
local subprocesses, terminal sandboxes only)."""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from sandbox.api.rest.limits import MAX_JSON_BODY_BYTES
from sandbox.models import Observation, Screenshot
from sandbox.service import Principal, SandboxService
from tests.unit.conftest import ADMIN, ALPHA, BETA, LOGGER

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JSON = {"content-type": "application/json"}


@pytest_asyncio.fixture
async def sandbox(api: httpx.AsyncClient) -> AsyncIterator[str]:
    """A terminal sandbox of tenant alpha; its id."""
    r = await api.post("/v1/sandboxes", json={"kind": "terminal", "labels": {"test": "rest"}}, headers=ALPHA)
    assert r.status_code == 201, r.text
    sandbox_id = str(r.json()["id"])
    yield sandbox_id
    r = await api.delete(f"/v1/sandboxes/{sandbox_id}", headers=ADMIN)
    assert r.status_code in (204, 404), r.text


async def count(api: httpx.AsyncClient) -> int:
    r = await api.get("/v1/sandboxes", headers=ADMIN)
    assert r.status_code == 200, r.text
    return len(r.json()["sandboxes"])


def error_of(r: httpx.Response, status: int) -> dict[str, str]:
    """The error object of a failed response, after checking its status and shape."""
    assert r.status_code == status, f"{r.status_code} != {status}: {r.text}"
    body = r.json()
    assert set(body["error"]) == {"code", "message"}, body
    assert body["error"]["message"], body
    return dict(body["error"])


async def exec_ok(api: httpx.AsyncClient, sandbox_id: str, cmd: str) -> str:
    r = await api.post(f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": cmd}, headers=ALPHA)
    assert r.status_code == 200, r.text
    assert r.json()["exit_code"] == 0, r.text
    return str(r.json()["stdout"])


# --------------------------------------------------------------------------- the happy path


async def test_healthz_and_openapi_need_no_token(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"ok": True}
    spec = (await api.get("/openapi.json")).json()
    assert "/v1/sandboxes/{sandbox_id}/step" in spec["paths"]
    assert "base64" in json.dumps(spec["components"]["schemas"]["Screenshot"]["properties"]["data"])
    assert (await api.get("/docs")).status_code == 200


async def test_lifecycle_exec_step_files_reset_delete(api: httpx.AsyncClient) -> None:
    before = await count(api)
    r = await api.post("/v1/sandboxes", json={"kind": "terminal", "env": {"GREETING": "hi"}}, headers=ALPHA)
    assert r.status_code == 201, r.text
    info = r.json()
    sid = info["id"]
    assert (info["tenant"], info["kind"], info["state"]) == ("alpha", "terminal", "running")
    assert await count(api) == before + 1
    assert (await api.get(f"/v1/sandboxes/{sid}", headers=ALPHA)).json()["id"] == sid
    assert sid in [s["id"] for s in (await api.get("/v1/sandboxes", headers=ALPHA)).json()["sandboxes"]]

    # exec, with and without "type"
    r = await api.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "echo $GREETING; exit 3"}, headers=ALPHA)
    assert r.status_code == 200, r.text
    assert (r.json()["stdout"], r.json()["exit_code"]) == ("hi\n", 3)
    r = await api.post(f"/v1/sandboxes/{sid}/exec", json={"type": "exec", "cmd": ["echo", "typed"]}, headers=ALPHA)
    assert r.json()["stdout"] == "typed\n"

    # step with an exec action, as JSON
    r = await api.post(
        f"/v1/sandboxes/{sid}/step", json={"action": {"type": "exec", "cmd": "echo stepped"}}, headers=ALPHA
    )
    assert r.status_code == 200, r.text
    obs = r.json()
    assert obs["exec"]["stdout"] == "stepped\n"
    assert obs["screenshot"] is None and obs["timings_ms"]["total"] >= 0
    actions = (await api.get(f"/v1/sandboxes/{sid}/actions", headers=ALPHA)).json()["actions"]
    assert [a["action"]["cmd"] for a in actions] == ["echo stepped"]

    # files: put, get (whole and a range), list, delete
    payload = bytes(range(256)) * 3
    r = await api.put(
        f"/v1/sandboxes/{sid}/files/content", params={"path": "dir/data.bin", "mode": "0600"}, content=payload,
        headers=ALPHA,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json() == {"path": "dir/data.bin", "size": len(payload)}
    r = await api.get(f"/v1/sandboxes/{sid}/files/content", params={"path": "dir/data.bin"}, headers=ALPHA)
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "application/octet-stream", payload)
    r = await api.get(
        f"/v1/sandboxes/{sid}/files/content", params={"path": "dir/data.bin", "offset": 10, "length": 5}, headers=ALPHA
    )
    assert r.content == payload[10:15]
    r = await api.put(
        f"/v1/sandboxes/{sid}/files/content", params={"path": "dir/data.bin", "append": "true"}, content=b"!",
        headers=ALPHA,
    )  # fmt: skip
    assert r.status_code == 200, r.text  # its reported size: see test_append_reports_the_new_size
    entries = (await api.get(f"/v1/sandboxes/{sid}/files", params={"path": "dir"}, headers=ALPHA)).json()["entries"]
    assert [(e["name"], e["type"], e["size"], e["mode"]) for e in entries] == [
        ("data.bin", "file", len(payload) + 1, 0o600)
    ]
    assert await exec_ok(api, sid, "cat dir/data.bin | wc -c") == f"{len(payload) + 1}\n"
    r = await api.delete(f"/v1/sandboxes/{sid}/files", params={"path": "dir/data.bin"}, headers=ALPHA)
    assert r.status_code == 204, r.text
    r = await api.get(f"/v1/sandboxes/{sid}/files/content", params={"path": "dir/data.bin"}, headers=ALPHA)
    assert error_of(r, 404)["code"] == "not_found"
    r = await api.delete(f"/v1/sandboxes/{sid}/files", params={"path": "dir"}, headers=ALPHA)
    assert "recursive" in error_of(r, 422)["message"]
    r = await api.delete(f"/v1/sandboxes/{sid}/files", params={"path": "dir", "recursive": "true"}, headers=ALPHA)
    assert r.status_code == 204, r.text

    # reset: a file written before is gone after, and so is the action history
    r = await api.put(f"/v1/sandboxes/{sid}/files/content", params={"path": "keep.txt"}, content=b"x", headers=ALPHA)
    assert r.status_code == 200, r.text
    r = await api.post(f"/v1/sandboxes/{sid}/reset", headers=ALPHA)
    assert r.status_code == 200, r.text
    assert (r.json()["id"], r.json()["state"]) == (sid, "running")
    r = await api.get(f"/v1/sandboxes/{sid}/files/content", params={"path": "keep.txt"}, headers=ALPHA)
    assert error_of(r, 404)["code"] == "not_found"
    assert (await api.get(f"/v1/sandboxes/{sid}/files", params={"path": "."}, headers=ALPHA)).json()["entries"] == []
    assert (await api.get(f"/v1/sandboxes/{sid}/actions", headers=ALPHA)).json()["actions"] == []
    assert await exec_ok(api, sid, "echo $GREETING") == "hi\n"

    # inspection
    health = (await api.get(f"/v1/sandboxes/{sid}/health", headers=ALPHA)).json()
    assert health["ok"] is True and health["checks"]["agent"]["ok"] is True
    r = await api.get(f"/v1/sandboxes/{sid}/logs", params={"tail": 10}, headers=ALPHA)
    assert (r.status_code, r.headers["content-type"]) == (200, "text/plain; charset=utf-8")
    r = await api.get(f"/v1/sandboxes/{sid}/observe", headers=ALPHA)
    assert r.status_code == 200 and r.json()["screenshot"] is None  # a terminal has no display

    # delete; afterwards the sandbox is unknown everywhere
    assert (await api.delete(f"/v1/sandboxes/{sid}", headers=ALPHA)).status_code == 204
    assert await count(api) == before
    missing = {"code": "not_found", "message": f"no sandbox {sid!r}"}
    assert error_of(await api.get(f"/v1/sandboxes/{sid}", headers=ALPHA), 404) == missing
    assert error_of(await api.post(f"/v1/sandboxes/{sid}/exec", json={"cmd": "true"}, headers=ALPHA), 404) == missing
    assert error_of(await api.delete(f"/v1/sandboxes/{sid}", headers=ALPHA), 404) == missing


async def test_screenshots_are_base64_in_json_and_raw_on_their_own_route(
    api: httpx.AsyncClient, service: SandboxService, sandbox: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake has no display: stand in for the service's screenshot to check the REST encoding."""
    shot = Screenshot(data=PNG, width=32, height=16, format="png")
    seen: dict[str, Any] = {}

    async def observe(principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80) -> Observation:
        seen.update(format=format, quality=quality)
        return Observation(screenshot=shot)

    async def screenshot(
        principal: Principal, sandbox_id: str, *, format: str = "png", quality: int = 80
    ) -> Screenshot:
        return shot

    monkeypatch.setattr(service, "observe", observe)
    monkeypatch.setattr(service, "screenshot", screenshot)
    r = await api.get(f"/v1/sandboxes/{sandbox}/observe", params={"format": "jpeg", "quality": 55}, headers=ALPHA)
    assert r.status_code == 200, r.text
    assert seen == {"format": "jpeg", "quality": 55}
    data = r.json()["screenshot"]["data"]
    assert isinstance(data, str) and base64.urlsafe_b64decode(data) == PNG
    obs = Observation.model_validate_json(r.content)
    assert obs.screenshot is not None and obs.screenshot.data == PNG
    r = await api.get(f"/v1/sandboxes/{sandbox}/screenshot", headers=ALPHA)
    assert (r.status_code, r.headers["content-type"], r.content) == (200, "image/png", PNG)
    assert (r.headers["x-screen-width"], r.headers["x-screen-height"]) == ("32", "16")
    r = await api.get(f"/v1/sandboxes/{sandbox}/observe", params={"format": "gif"}, headers=ALPHA)
    assert "format" in error_of(r, 422)["message"]
    r = await api.get(f"/v1/sandboxes/{sandbox}/screenshot", params={"quality": 101}, headers=ALPHA)
    assert "quality" in error_of(r, 422)["message"]


async def test_screenshot_of_a_terminal_is_a_failed_precondition(api: httpx.AsyncClient, sandbox: str) -> None:
    r = await api.get(f"/v1/sandboxes/{sandbox}/screenshot", headers=ALPHA)
    assert "no display" in error_of(r, 409)["message"]
    r = await api.post(f"/v1/sandboxes/{sandbox}/step", json={"action": {"type": "click", "x": 5}}, headers=ALPHA)
    assert "no display" in error_of(r, 409)["message"]


# --------------------------------------------------------------------------- bad input changes nothing


async def test_invalid_actions_and_fields_are_422_and_change_nothing(api: httpx.AsyncClient, sandbox: str) -> None:
    before = await count(api)
    step = f"/v1/sandboxes/{sandbox}/step"

    r = await api.post(step, json={"action": {"type": "teleport", "x": 1}}, headers=ALPHA)
    error = error_of(r, 422)
    assert error["code"] == "invalid_argument"
    assert "'teleport'" in error["message"] and "'type'" in error["message"]
    assert r.json()["detail"][0]["loc"] == ["body", "action"]

    r = await api.post(step, json={"action": {"type": "click", "x": -5, "y": 3}}, headers=ALPHA)
    assert "body.action.click.x" in error_of(r, 422)["message"]

    r = await api.post(step, json={"action": {"type": "exec", "cmd": "touch nope", "timeout": "soon"}}, headers=ALPHA)
    assert "body.action.exec.timeout" in error_of(r, 422)["message"]

    r = await api.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "touch nope", "timeout": "soon"}, headers=ALPHA)
    assert "body.timeout" in error_of(r, 422)["message"]
    r = await api.post(f"/v1/sandboxes/{sandbox}/exec", json={"type": "click", "cmd": "touch nope"}, headers=ALPHA)
    assert "body.type" in error_of(r, 422)["message"]
    r = await api.post(step, json={"action": {"type": "exec", "cmd": "touch nope"}, "extra": 1}, headers=ALPHA)
    assert "body.extra" in error_of(r, 422)["message"]
    r = await api.post(step, json={}, headers=ALPHA)
    assert "body.action: Field required" in error_of(r, 422)["message"]

    r = await api.post("/v1/sandboxes", json={"kind": "terminal", "resources": {"cpus": 0}}, headers=ALPHA)
    assert "body.resources.cpus" in error_of(r, 422)["message"]
    r = await api.post("/v1/sandboxes", json={"kind": "mainframe"}, headers=ALPHA)
    assert "body.kind" in error_of(r, 422)["message"]
    r = await api.post("/v1/sandboxes", json={"kind": "desktop"}, headers=ALPHA)
    assert "terminal sandboxes only" in error_of(r, 409)["message"]
    r = await api.put(
        f"/v1/sandboxes/{sandbox}/files/content", params={"path": "nope", "mode": "999"}, content=b"x", headers=ALPHA
    )
    assert "query.mode" in error_of(r, 422)["message"]
    r = await api.get(f"/v1/sandboxes/{sandbox}/files/content", params={"path": "x", "offset": -1}, headers=ALPHA)
    assert "query.offset" in error_of(r, 422)["message"]
    r = await api.get(f"/v1/sandboxes/{sandbox}/files", headers=ALPHA)
    assert "query.path" in error_of(r, 422)["message"]

    assert error_of(await api.get("/v1/sandboxes/term-000000000000", headers=ALPHA), 404)["code"] == "not_found"
    r = await api.post("/v1/sandboxes/term-000000000000/step", json={"action": {"type": "wait", "seconds": 0}})
    assert error_of(r, 401)["code"] == "unauthenticated"

    assert await count(api) == before
    assert await exec_ok(api, sandbox, "ls") == ""  # no "nope" anywhere
    assert (await api.get(f"/v1/sandboxes/{sandbox}/actions", headers=ALPHA)).json()["actions"] == []


async def test_another_tenants_sandbox_looks_missing(api: httpx.AsyncClient, sandbox: str) -> None:
    missing_id = "term-" + "0" * (len(sandbox) - 5)
    routes: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "", {}),
        ("DELETE", "", {}),
        ("POST", "/reset", {}),
        ("POST", "/step", {"json": {"action": {"type": "exec", "cmd": "touch stolen"}}}),
        ("POST", "/exec", {"json": {"cmd": "touch stolen"}}),
        ("GET", "/observe", {}),
        ("GET", "/screenshot", {}),
        ("GET", "/files", {"params": {"path": "."}}),
        ("GET", "/files/content", {"params": {"path": "x"}}),
        ("PUT", "/files/content", {"params": {"path": "stolen"}, "content": b"x"}),
        ("DELETE", "/files", {"params": {"path": "x"}}),
        ("GET", "/health", {}),
        ("GET", "/logs", {}),
        ("GET", "/actions", {}),
    ]
    for method, suffix, kwargs in routes:
        theirs = await api.request(method, f"/v1/sandboxes/{sandbox}{suffix}", headers=BETA, **kwargs)
        nobodys = await api.request(method, f"/v1/sandboxes/{missing_id}{suffix}", headers=BETA, **kwargs)
        assert error_of(theirs, 404) == {"code": "not_found", "message": f"no sandbox {sandbox!r}"}, suffix
        assert error_of(nobodys, 404) == {"code": "not_found", "message": f"no sandbox {missing_id!r}"}, suffix
        assert theirs.json().keys() == nobodys.json().keys()
        assert sorted(theirs.headers.items()) == sorted(nobodys.headers.items()), suffix

    assert sandbox not in [s["id"] for s in (await api.get("/v1/sandboxes", headers=BETA)).json()["sandboxes"]]
    assert sandbox in [s["id"] for s in (await api.get("/v1/sandboxes", headers=ADMIN)).json()["sandboxes"]]
    assert (await api.get(f"/v1/sandboxes/{sandbox}", headers=ALPHA)).json()["state"] == "running"
    assert await exec_ok(api, sandbox, "ls") == ""  # beta's writes never landed


async def test_no_or_bad_token_is_401(api: httpx.AsyncClient, sandbox: str) -> None:
    before = await count(api)
    for headers in (
        {},
        {"Authorization": "Bearer not-a-real-token-at-all"},
        {"Authorization": "Basic YWxwaGE6c2VjcmV0"},
        {"Authorization": "alpha-token-0123456789"},
        {"Authorization": "Bearer "},
    ):
        r = await api.post("/v1/sandboxes", json={"kind": "terminal"}, headers=headers)
        assert error_of(r, 401)["code"] == "unauthenticated", headers
        assert r.headers["www-authenticate"] == "Bearer"
        r = await api.get(f"/v1/sandboxes/{sandbox}", headers=headers)
        assert error_of(r, 401)["code"] == "unauthenticated", headers
    r = await api.post("/v1/sandboxes", json={"kind": 5}, headers={})
    assert error_of(r, 401)["code"] == "unauthenticated"  # no schema feedback before authentication
    assert await count(api) == before


async def test_step_on_a_dead_sandbox_is_409_with_the_reason(api: httpx.AsyncClient, sandbox: str) -> None:
    # The exec'd shell's parent is the sandbox's agent: kill it from inside.
    r = await api.post(f"/v1/sandboxes/{sandbox}/exec", json={"cmd": "kill -9 $PPID"}, headers=ALPHA)
    assert "not usable" in error_of(r, 409)["message"]
    r = await api.post(f"/v1/sandboxes/{sandbox}/step", json={"action": {"type": "exec", "cmd": "true"}}, headers=ALPHA)
    error = error_of(r, 409)
    assert error["code"] == "failed_precondition"
    assert f"sandbox {sandbox} is unhealthy" in error["message"]
    info = (await api.get(f"/v1/sandboxes/{sandbox}", headers=ALPHA)).json()
    assert info["state"] == "unhealthy" and info["error"] and info["error"] in error["message"]
    health = (await api.get(f"/v1/sandboxes/{sandbox}/health", headers=ALPHA)).json()
    assert health["ok"] is False
    r = await api.post(f"/v1/sandboxes/{sandbox}/reset", headers=ALPHA)  # reset brings it back
    assert r.status_code == 200 and r.json()["state"] == "running", r.text
    assert await exec_ok(api, sandbox, "echo back") == "back\n"


async def test_paths_outside_the_workspace_are_403(
    api: httpx.AsyncClient, sandbox: str, socket_root: str, service: SandboxService
) -> None:
    record = await service.store.get("sandboxes", sandbox)
    assert record is not None
    outside = os.path.join(socket_root, record["instance"], "outside.txt")  # next to the workspace, not in it
    with open(outside, "wb") as f:
        f.write(b"secret")
    files, content = f"/v1/sandboxes/{sandbox}/files", f"/v1/sandboxes/{sandbox}/files/content"
    for path in ("../outside.txt", outside, "a/../../outside.txt"):
        r = await api.get(content, params={"path": path}, headers=ALPHA)
        assert error_of(r, 403)["code"] == "permission_denied"
        assert repr(path) in r.json()["error"]["message"]
        r = await api.put(content, params={"path": path}, content=b"overwritten", headers=ALPHA)
        assert error_of(r, 403)["code"] == "permission_denied"
        r = await api.delete(files, params={"path": path}, headers=ALPHA)
        assert error_of(r, 403)["code"] == "permission_denied"
    assert error_of(await api.get(files, params={"path": "/"}, headers=ALPHA), 403)["code"] == "permission_denied"
    await exec_ok(api, sandbox, f"ln -s {os.path.dirname(outside)} escape")
    r = await api.get(content, params={"path": "escape/outside.txt"}, headers=ALPHA)
    assert "through a symlink" in error_of(r, 403)["message"]
    with open(outside, "rb") as f:
        assert f.read() == b"secret"


async def test_bodies_over_the_limit_are_413(api: httpx.AsyncClient, sandbox: str) -> None:
    before = await count(api)
    huge = json.dumps({"cmd": "x" * (MAX_JSON_BODY_BYTES + 1)}).encode()
    r = await api.post(f"/v1/sandboxes/{sandbox}/exec", content=huge, headers={**ALPHA, **JSON})
    assert error_of(r, 413)["code"] == "resource_exhausted"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"kind": "terminal", "labels": {"a": "'
        for _ in range(MAX_JSON_BODY_BYTES // 65536 + 1):
            yield b"x" * 65536
        yield b'"}}'

    r = await api.post("/v1/sandboxes", content=chunks(), headers={**ALPHA, **JSON})
    assert error_of(r, 413)["code"] == "resource_exhausted"
    assert await count(api) == before


async def test_an_unexpected_error_is_a_logged_500(
    api: httpx.AsyncClient, service: SandboxService, sandbox: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    async def broken(principal: Principal, sandbox_id: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "get", broken)
    with caplog.at_level(logging.ERROR, logger=LOGGER.name):
        r = await api.get(f"/v1/sandboxes/{sandbox}", headers=ALPHA)
    assert error_of(r, 500) == {"code": "internal", "message": "internal error; the server log has the details"}
    assert "a bug" not in r.text
    [record] = [rec for rec in caplog.records if rec.name == LOGGER.name and rec.levelno >= logging.ERROR]
    assert record.exc_info is not None and "a bug" in str(record.exc_info[1])


async def test_unknown_routes_and_methods_keep_the_error_shape(api: httpx.AsyncClient) -> None:
    assert error_of(await api.get("/v1/nothing", headers=ALPHA), 404)["code"] == "not_found"
    assert error_of(await api.patch("/v1/sandboxes", headers=ALPHA), 405)["code"] == "method_not_allowed"


# --------------------------------------------------------------------------- a sweep of malformed bodies

_MALFORMED_ANY: list[bytes] = [
    b"",
    b"not json",
    b"\xff\xfe\xfa",
    b"{",
    b"[]",
    b"null",
    b"1",
    b'"a string"',
    b"[" * 50_000,
    b'{"a": ' * 5_000 + b"1" + b"}" * 5_000,
    b"NaN",
    b"1e400",
    b'{"kind": 5}',
    b'{"cmd": 1e400}',
    b'{"action": NaN}',
]
_MALFORMED: dict[str, list[Any]] = {
    "/v1/sandboxes": [
        {},
        {"kind": None},
        {"kind": ["terminal"]},
        {"kind": "terminal", "resources": {"cpus": "many"}},
        {"kind": "terminal", "resources": {"memory_mb": 10**100}},
        {"kind": "terminal", "resources": {"cpus": float("inf")}},
        {"kind": "terminal", "resources": {"pids": float("nan")}},
        {"kind": "terminal", "screen": {"width": -1}},
        {"kind": "terminal", "env": {"A": 1}},
        {"kind": "terminal", "env": {f"K{i}": "v" for i in range(65)}},
        {"kind": "terminal", "labels": ["a"]},
        {"kind": "terminal", "volumes": [{"name": "../x", "path": "/data"}]},
        {"kind": "terminal", "volumes": [{"name": "ok", "path": "/proc"}]},
        {"kind": "terminal", "network": "everywhere"},
        {"kind": "terminal", "unknown": True},
    ],
    "step": [
        {},
        {"action": None},
        {"action": {}},
        {"action": "exec"},
        {"action": {"type": 5}},
        {"action": {"type": "exec"}},
        {"action": {"type": "exec", "cmd": None}},
        {"action": {"type": "exec", "cmd": [1, 2]}},
        {"action": {"type": "exec", "cmd": "true", "timeout": 10**100}},
        {"action": {"type": "exec", "cmd": "true", "timeout": float("inf")}},
        {"action": {"type": "exec", "cmd": "true", "env": {"A": None}}},
        {"action": {"type": "wait", "seconds": float("nan")}},
        {"action": {"type": "wait", "seconds": 10**400}},
        {"action": {"type": "drag", "x": 1, "y": 1, "to_x": 10**30, "to_y": 1}},
        {"action": {"type": "scroll", "dy": -(10**20)}},
        {"action": {"type": "type_text", "text": "x" * 100_001}},
        {"action": {"type": "hotkey", "keys": []}},
        {"action": {"type": "hotkey", "keys": ["a"] * 9}},
        {"action": {"type": "key", "key": ""}},
        {"action": {"type": "navigate", "url": ""}},
        {"action": {"type": "click", "button": "side"}},
        {"action": {"type": "exec", "cmd": "true"}, "screenshot": "later"},
        {"action": {"type": "exec", "cmd": "true"}, "screenshot": [True]},
        [{"action": {"type": "exec", "cmd": "true"}}],
    ],
    "exec": [
        {},
        {"cmd": None},
        {"cmd": 10**100},
        {"cmd": {"sh": "true"}},
        {"cmd": []},
        {"cmd": ""},
        {"cmd": "true", "timeout": 0},
        {"cmd": "true", "timeout": -(10**100)},
        {"cmd": "true", "env": {"": "x"}},
        {"cmd": "true", "cwd": "/no/such/dir"},
        {"cmd": "true", "session": ""},
        {"cmd": ["true"], "session": "s"},
        {"cmd": "true", "keep_background": "sometimes"},
        {"cmd": "true", "type": "exec", "extra": 1},
    ],
}
_WEIRD_QUERIES: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "files/content", {"path": "\u0000"}),
    ("GET", "files/content", {"path": "x", "offset": str(10**30)}),
    ("GET", "files/content", {"path": "x", "length": "lots"}),
    ("GET", "files", {"path": "x" * 5000}),
    ("GET", "files", {"path": "no/such/dir"}),
    ("PUT", "files/content", {"path": "\u0000"}),
    ("PUT", "files/content", {"path": ".", "mode": "644"}),
    ("PUT", "files/content", {"path": "x", "mode": "0x1ff"}),
    ("PUT", "files/content", {"path": "x", "append": "perhaps"}),
    ("DELETE", "files", {"path": "."}),
    ("DELETE", "files", {"path": "x", "recursive": "2"}),
    ("GET", "logs", {"tail": str(-1)}),
    ("GET", "observe", {"quality": "high"}),
]


async def test_malformed_input_never_gives_a_500(api: httpx.AsyncClient, sandbox: str) -> None:
    before = await count(api)
    outcomes: list[str] = []
    for route, bodies in _MALFORMED.items():
        url = route if route.startswith("/") else f"/v1/sandboxes/{sandbox}/{route}"
        raw = [json.dumps(b).encode() for b in bodies] + _MALFORMED_ANY
        for body in raw:
            for headers in (JSON, {}, {"content-type": "text/plain"}):
                r = await api.post(url, content=body, headers={**ALPHA, **headers})
                outcomes.append(f"{r.status_code} POST {route} {body[:60]!r}")
                assert r.status_code < 500, f"{r.status_code} for {route} {body[:200]!r}: {r.text[:500]}"
                if r.status_code >= 400:
                    error_of(r, r.status_code)
                if route == "/v1/sandboxes":  # every create body is bad: none may succeed
                    assert r.status_code in (400, 409, 422), f"{body[:200]!r}: {r.text[:300]}"
    for body in (b'{"anything": 1}', b"not json", b"[" * 50_000):  # reset takes no body: it is ignored
        r = await api.post(f"/v1/sandboxes/{sandbox}/reset", content=body, headers={**ALPHA, **JSON})
        outcomes.append(f"{r.status_code} POST reset {body[:60]!r}")
        assert r.status_code < 500, f"{r.status_code} for reset {body[:200]!r}: {r.text[:500]}"
    for method, route, params in _WEIRD_QUERIES:
        r = await api.request(
            method, f"/v1/sandboxes/{sandbox}/{route}", params=params, content=b"x" if method == "PUT" else None,
            headers=ALPHA,
        )  # fmt: skip
        outcomes.append(f"{r.status_code} {method} {route} {params}")
        assert 400 <= r.status_code < 500, f"{r.status_code} for {method} {route} {params}: {r.text[:500]}"
        error_of(r, r.status_code)
    assert await count(api) == before
    assert (await api.get(f"/v1/sandboxes/{sandbox}/health", headers=ALPHA)).json()["ok"] is True
    assert await exec_ok(api, sandbox, "echo alive") == "alive\n"
    assert len(outcomes) > 300


# --------------------------------------------------------------------------- known bugs below the REST layer

# Arguments the OS cannot take (NUL bytes, '=' in env names) are bad input, never a 500.
_OS_REFUSED_ARGS: list[tuple[str, dict[str, Any]]] = [
    ("exec", {"cmd": ["echo", "\u0000"]}),
    ("exec", {"cmd": "true", "env": {"A=B": "x"}}),
    ("exec", {"cmd": "true", "env": {"A\u0000": "x"}}),
    ("exec", {"cmd": "true", "env": {"A": "x\u0000"}}),
    ("exec", {"cmd": "true", "cwd": "\u0000"}),
    ("step", {"action": {"type": "exec", "cmd": ["echo", "\u0000"]}}),
]


@pytest.mark.parametrize(("route", "body"), _OS_REFUSED_ARGS, ids=[json.dumps(b) for _, b in _OS_REFUSED_ARGS])
async def test_exec_arguments_the_os_refuses_are_422(
    api: httpx.AsyncClient, sandbox: str, route: str, body: dict[str, Any]
) -> None:
    r = await api.post(f"/v1/sandboxes/{sandbox}/{route}", json=body, headers=ALPHA)
    assert error_of(r, 422)["code"] == "invalid_argument"


async def test_append_reports_the_new_size(api: httpx.AsyncClient, sandbox: str) -> None:
    content = f"/v1/sandboxes/{sandbox}/files/content"
    assert (await api.put(content, params={"path": "log"}, content=b"12345", headers=ALPHA)).json()["size"] == 5
    r = await api.put(content, params={"path": "log", "append": "true"}, content=b"67", headers=ALPHA)
    assert (await api.get(content, params={"path": "log"}, headers=ALPHA)).content == b"1234567"
    assert r.json() == {"path": "log", "size": 7}
