"""The OSWorld API's parts that need no display: forms as the setup controller sends them, the terminal's text,
commands as OSWorld's server prepares them, the AVI container, and the server itself on a loopback port."""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from sandbox.agent.osworld_api import commands
from sandbox.agent.osworld_api.app import table
from sandbox.agent.osworld_api.recording import AviWriter
from sandbox.agent.osworld_api.terminal import screen_text
from sandbox.agent.osworld_api.web import ApiServer, HttpError, parse_form


def test_a_multipart_form_keeps_binary_data_byte_exact() -> None:
    data = bytes(range(256)) + b"\r\n--boundary\r\n\r\n\n\r" + os.urandom(2048)
    boundary = "a1b2c3"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file_path"\r\n\r\n/home/user/ü.bin\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file_data"; filename="ü.bin"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    fields, files = parse_form(f"multipart/form-data; boundary={boundary}", body)
    assert fields == {"file_path": "/home/user/ü.bin"}
    assert files["file_data"].data == data and files["file_data"].filename == "ü.bin"


def test_an_urlencoded_form() -> None:
    assert parse_form("application/x-www-form-urlencoded", b"file_path=%2Fhome%2Fuser%2Fa+b&x=") == (
        {"file_path": "/home/user/a b", "x": ""},
        {},
    )


def test_the_terminal_text_applies_escapes_returns_and_backspaces() -> None:
    raw = (
        "\x1b[?2004h\x1b]0;user@sandbox: ~\x07user@sandbox:~$ ecx\bho hi\r\n"
        "\x1b[?2004l\rhi\r\nprogress 10%\rprogress 100%\r\n"
    )
    assert screen_text(raw) == "user@sandbox:~$ echo hi\nhi\nprogress 100%\n"


def test_commands_are_prepared_as_osworlds_server_prepares_them() -> None:
    home = os.path.expanduser("~")
    assert commands.command_of({"command": "ls -la '~/a b'", "shell": False}) == (["ls", "-la", f"{home}/a b"], False)
    assert commands.command_of({"command": ["cat", "~/x", "a~/y"]}) == (["cat", f"{home}/x", "a~/y"], False)
    assert commands.command_of({"command": "echo ~/x | wc", "shell": True}) == ("echo ~/x | wc", True)
    with pytest.raises(HttpError) as err:
        commands.command_of({"shell": True})
    assert err.value.status == 400


def test_a_command_past_its_time_is_killed_with_its_group() -> None:
    with pytest.raises(commands.subprocess.TimeoutExpired):
        commands.run("sleep 30 & sleep 30", shell=True, timeout=0.3)


def test_the_avi_has_its_frames_indexed_and_counted() -> None:
    out = io.BytesIO()
    writer = AviWriter(out, 32, 24)
    jpegs = []
    for colour in ("red", "green", "blue"):
        frame = io.BytesIO()
        Image.new("RGB", (32, 24), colour).save(frame, "JPEG")
        jpegs.append(frame.getvalue())
        writer.add(jpegs[-1])
    writer.close()
    data = out.getvalue()
    assert data[:4] == b"RIFF" and struct.unpack("<I", data[4:8])[0] == len(data) - 8 and data[8:12] == b"AVI "
    avih = data.index(b"avih") + 8
    assert struct.unpack("<I", data[avih + 16 : avih + 20])[0] == 3  # total frames
    assert struct.unpack("<II", data[avih + 32 : avih + 40]) == (32, 24)
    movi = data.index(b"movi")
    (movi_size,) = struct.unpack("<I", data[movi - 4 : movi])
    idx = data.index(b"idx1")
    assert movi + movi_size == idx  # the movi list ends where the index starts
    for i, jpeg in enumerate(jpegs):
        _, _, offset, size = struct.unpack("<4sIII", data[idx + 8 + 16 * i : idx + 24 + 16 * i])
        assert data[movi + offset + 8 : movi + offset + 8 + size] == jpeg


@pytest.fixture
def api(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    server = ApiServer(("127.0.0.1", 0), table(), logger=logging.getLogger("test.osworld_api"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _call(url: str, body: dict[str, Any] | None = None) -> tuple[int, str, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def test_the_server_answers_execute_and_errors(api: str, tmp_path: Any) -> None:
    status, kind, body = _call(f"{api}/execute", {"command": "pwd; echo e >&2; exit 3", "shell": True})
    assert (status, kind) == (200, "application/json")
    assert json.loads(body) == {"status": "success", "output": f"{tmp_path}\n", "error": "e\n", "returncode": 3}
    assert _call(f"{api}/nowhere")[0] == 404
    assert _call(f"{api}/execute")[0] == 405  # a GET
    status, _, body = _call(f"{api}/run_bash_script", {"script": "exit 0", "working_dir": "/no/such/dir"})
    assert status == 400 and json.loads(body)["returncode"] == -1
    status, kind, body = _call(f"{api}/desktop_path", {})
    assert json.loads(body) == {"desktop_path": f"{tmp_path}/Desktop"}


def test_the_server_imports_neither_pillow_nor_xlib_until_asked_for_the_screen() -> None:
    """Idle, a desktop's OSWorld API holds neither (about 2 MB of every desktop's memory)."""
    code = (
        "import sys, sandbox.agent.osworld_api.__main__, sandbox.agent.osworld_api.app\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'PIL', 'Xlib'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
