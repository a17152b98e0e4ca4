"""OSWorld's in-VM API (sandbox/agent/osworld_api) in a real, network-none desktop sandbox, reached as OSWorld's
harness on this platform reaches it: through a real `sandbox server`'s preview route of port 5000. Each route
answers with the status, content type and fields that OSWorld's PythonController and SetupController read."""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest
from PIL import Image

from tests.conftest import require_image
from tests.docker.preview_common import TOKEN, Server, preview_server
from tests.polling import wait_until

pytestmark = pytest.mark.docker

API_PORT = 5000
RED = (220, 20, 30)
# The controller's own command for an action (PythonController.execute_python_command's prefix).
PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {command}"


@pytest.fixture(scope="module")
def server(
    backend: Any, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    require_image(docker_client, "desktop")
    with preview_server(tmp_path_factory.mktemp("osworld-api")) as server:
        yield server


@pytest.fixture(scope="module")
def desktop(server: Server) -> Iterator[str]:
    info = server.ok(server.http.post("/v1/sandboxes", json={"kind": "desktop", "network": "none"}))
    try:
        assert info["spec"]["network"] == "none"
        yield info["id"]
    finally:
        server.http.delete(f"/v1/sandboxes/{info['id']}")


@pytest.fixture(scope="module")
def api(server: Server, desktop: str) -> Iterator[httpx.Client]:
    """The API's root through the preview route (the ``ports`` form: the prefix is stripped)."""
    base = f"{server.url}/v1/sandboxes/{desktop}/ports/{API_PORT}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as client:
        wait_until(lambda: _answers(client), within=30, what="OSWorld's API answering through the preview")
        yield client


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/platform").status_code == 200
    except httpx.HTTPError:
        return False


def _execute(api: httpx.Client, command: Any, *, shell: bool = False, route: str = "/execute") -> dict[str, Any]:
    response = api.post(route, json={"command": command, "shell": shell})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return dict(response.json())


def _windows(api: httpx.Client) -> str:
    return str(_execute(api, ["wmctrl", "-lx"])["output"])


def test_the_wallpaper_is_painted_and_sent_back(api: httpx.Client) -> None:
    own = api.post("/wallpaper")  # before a task sets one: the image's own gradient, as painted
    assert own.status_code == 200 and own.headers["content-type"] == "image/png"
    drawn = Image.open(io.BytesIO(own.content)).convert("RGB")
    shot = Image.open(io.BytesIO(api.get("/screenshot").content)).convert("RGB")
    assert drawn.size == shot.size and all(drawn.getpixel((100, y)) == shot.getpixel((100, y)) for y in (0, 300, 700))
    picture = io.BytesIO()
    Image.new("RGB", (64, 40), RED).save(picture, "PNG")
    _upload(api, "~/Pictures/red.png", picture.getvalue())
    changed = api.post("/setup/change_wallpaper", json={"path": "~/Pictures/red.png"})
    assert changed.status_code == 200 and changed.text == "Wallpaper changed successfully"
    sent = api.post("/wallpaper")
    assert sent.status_code == 200 and sent.content == picture.getvalue()
    assert sent.headers["content-type"] == "image/png"
    shot = Image.open(io.BytesIO(api.get("/screenshot").content)).convert("RGB")
    assert shot.getpixel((100, 100)) == RED  # no window yet: the root window shows (the pointer is mid-screen)
    missing = api.post("/setup/change_wallpaper", json={"path": "~/Pictures/none.png"})
    assert missing.status_code == 404


def test_screenshot_is_a_png_of_the_screen_size(api: httpx.Client) -> None:
    shot = api.get("/screenshot")
    assert shot.status_code == 200 and shot.headers["content-type"] == "image/png"
    assert shot.content[:8] == b"\x89PNG\r\n\x1a\n"
    size = api.post("/screen_size")
    assert size.status_code == 200 and size.json() == {"width": 1280, "height": 800}
    assert Image.open(io.BytesIO(shot.content)).size == (1280, 800)


def test_an_action_moves_the_pointer_and_the_screenshot_draws_it(api: httpx.Client) -> None:
    before = Image.open(io.BytesIO(api.get("/screenshot").content)).convert("RGB")
    command = ["python", "-c", PREFIX.format(command="pyautogui.moveTo(300, 200)")]
    done = _execute(api, command)
    assert done == {"status": "success", "output": "", "error": "", "returncode": 0}
    assert api.get("/cursor_position").json() == [300, 200]
    after = Image.open(io.BytesIO(api.get("/screenshot").content)).convert("RGB")
    box = (296, 196, 320, 224)  # the arrow's tip sits at the pointer
    assert after.crop(box).tobytes() != before.crop(box).tobytes(), "no pointer drawn at (300, 200)"


def test_execute_shapes(api: httpx.Client) -> None:
    shell = _execute(api, "echo $HOME; pwd; echo oops >&2; exit 4", shell=True)
    assert shell == {"status": "success", "output": "/home/user\n/home/user\n", "error": "oops\n", "returncode": 4}
    assert _execute(api, ["ls", "-d", "~/Desktop"])["output"] == "/home/user/Desktop\n"  # ~/ expanded
    assert _execute(api, "printf '%s|' a 'b c'")["output"] == "a|b c|"  # a string without shell: shlex-split
    platform = _execute(api, ["python", "-c", PREFIX.format(command="import platform; print(platform.system())")])
    assert platform["output"].strip() == "Linux"
    assert _execute(api, ["true"], route="/setup/execute")["returncode"] == 0
    missing = api.post("/execute", json={"command": ["no-such-program"], "shell": False})
    assert missing.status_code == 500 and missing.json()["status"] == "error" and "no-such-program" in missing.text
    assert api.get("/platform").text == "Linux"


def test_run_python_and_run_bash_script(api: httpx.Client) -> None:
    ok = api.post("/run_python", json={"code": "import os\nprint(os.getcwd())"}).json()
    assert ok["status"] == "success" and ok["output"] == "/home/user\n" and ok["returncode"] == 0
    failed = api.post("/run_python", json={"code": "raise SystemExit('bad')"}).json()
    assert failed["status"] == "error" and "bad" in failed["error"] and failed["returncode"] == 1
    assert "error" in api.post("/run_python", json={}).json()  # the controller reads "error" of a non-200
    script = api.post("/run_bash_script", json={"script": "pwd\necho e >&2\nexit 2", "working_dir": "~/Documents"})
    assert script.status_code == 200
    assert script.json() == {"status": "error", "output": "/home/user/Documents\n", "error": "e\n", "returncode": 2}
    slow = api.post("/run_bash_script", json={"script": "sleep 30", "timeout": 1})
    assert slow.status_code == 500
    assert slow.json() == {
        "status": "error",
        "output": "",
        "error": "Script execution timed out after 1 seconds",
        "returncode": -1,
    }


def _upload(api: httpx.Client, path: str, data: bytes) -> httpx.Response:
    """As SetupController._upload_file_setup sends it: multipart fields file_path and file_data."""
    return api.post("/setup/upload", data={"file_path": path}, files={"file_data": (os.path.basename(path), data)})


def test_upload_file_and_list_directory(api: httpx.Client) -> None:
    blob = bytes(range(256)) * 64 + b"\r\n--\r\n\r" + os.urandom(4096)
    uploaded = _upload(api, "/home/user/Desktop/blob.bin", blob)
    assert uploaded.status_code == 200 and uploaded.text == "File Uploaded"
    got = api.post("/file", data={"file_path": "/home/user/Desktop/blob.bin"})
    assert got.status_code == 200 and got.content == blob
    assert api.post("/file", data={"file_path": "/home/sandbox/Desktop/blob.bin"}).content == blob  # the same file
    assert api.post("/file", data={"file_path": "/home/user/Desktop/none"}).status_code == 404
    # A folder that does not exist is not made (as on the VM): the setup step fails loudly.
    assert _upload(api, "/home/user/nowhere/x.bin", b"x").status_code == 500
    tree = api.post("/list_directory", json={"path": "~/Desktop"})
    assert tree.status_code == 200
    root = tree.json()["directory_tree"]
    assert root["type"] == "directory" and root["name"] == "Desktop"
    assert {"type": "file", "name": "blob.bin"} in root["children"]
    assert api.post("/list_directory", json={"path": "~/none"}).status_code == 404
    assert api.post("/desktop_path").json() == {"desktop_path": "/home/user/Desktop"}


def test_launch_activate_size_and_close_a_window(api: httpx.Client) -> None:
    command = ["xterm", "-T", "launched-xterm", "-e", "sleep", "600"]  # no shell: no prompt retitles it
    launched = api.post("/setup/launch", json={"command": command, "shell": False})
    assert launched.status_code == 200 and launched.text == f"{' '.join(command)} launched successfully"
    wait_until(lambda: "launched-xterm" in _windows(api), within=20, what="the launched xterm's window")
    activated = api.post("/setup/activate_window", json={"window_name": "launched-xterm", "strict": False})
    assert activated.status_code == 200 and activated.text == "Window activated successfully"
    active = _execute(api, "xdotool getactivewindow getwindowname", shell=True)["output"]
    assert active.strip() == "launched-xterm"
    size = api.post("/window_size", data={"app_class_name": "xterm"})
    assert size.status_code == 200 and size.json()["width"] > 100 and size.json()["height"] > 100
    assert api.post("/window_size", data={"app_class_name": "no-such-app"}).status_code == 404
    closed = api.post("/setup/close_window", json={"window_name": "launched-xterm", "strict": True})
    assert closed.status_code == 200 and closed.text == "Window closed successfully"
    wait_until(lambda: "launched-xterm" not in _windows(api), within=20, what="the xterm's window closing")
    # As on the VM, a window that is not there is no error.
    assert api.post("/setup/activate_window", json={"window_name": "no-such-window"}).status_code == 200


def test_open_file_raises_its_window(api: httpx.Client) -> None:
    assert _upload(api, "~/Documents/notes.txt", b"some notes\n").status_code == 200
    opened = api.post("/setup/open_file", json={"path": "~/Documents/notes.txt"})
    assert opened.status_code == 200 and opened.text == "File opened and window activated successfully"
    active = _execute(api, "xdotool getactivewindow getwindowname", shell=True)["output"]
    assert "notes.txt" in active
    assert api.post("/setup/open_file", json={"path": "~/Documents/none.txt"}).status_code == 404
    api.post("/setup/close_window", json={"window_name": "notes.txt"})


def test_execute_with_verification(api: httpx.Client) -> None:
    body = {"command": "touch ~/verified", "shell": True, "verification": {"command_success": "test -f ~/verified"}}
    passed = api.post("/setup/execute_with_verification", json={**body, "max_wait_time": 5, "check_interval": 0.2})
    assert passed.status_code == 200 and passed.json()["verification"] == "passed"
    failing = {"command": "true", "shell": True, "verification": {"window_exists": "no-such-window"}}
    failed = api.post("/setup/execute_with_verification", json={**failing, "max_wait_time": 1, "check_interval": 0.2})
    assert failed.status_code == 500 and failed.json()["status"] == "verification_failed"


def test_terminal_and_accessibility(api: httpx.Client) -> None:
    assert api.get("/terminal").json() == {"output": None}  # no terminal opened yet
    _execute(api, ["gnome-terminal", "--", "bash", "-c", "echo terminal-says-hi; exec bash"])
    wait_until(
        lambda: "terminal-says-hi" in (api.get("/terminal").json()["output"] or ""),
        within=20,
        what="the terminal's text in /terminal",
    )
    tree = api.get("/accessibility")
    assert tree.status_code == 200 and tree.json()["AT"] is None  # no AT-SPI in the image: the controller's None


def test_recording_is_a_motion_jpeg_avi(api: httpx.Client) -> None:
    assert api.post("/end_recording").status_code == 400  # nothing recording
    started = api.post("/start_recording")
    assert started.status_code == 200 and started.json() == {"status": "success", "message": "Started recording."}
    assert api.post("/start_recording").status_code == 400  # one at a time
    _execute(api, ["python", "-c", PREFIX.format(command="pyautogui.moveTo(500, 500, 1.0)")])
    video = api.post("/end_recording")
    assert video.status_code == 200 and video.headers["content-type"] == "video/x-msvideo"
    frames = _avi_frames(video.content)
    assert len(frames) >= 3 and all(f.startswith(b"\xff\xd8\xff") for f in frames)
    assert Image.open(io.BytesIO(frames[-1])).size == (1280, 800)


def _avi_frames(data: bytes) -> list[bytes]:
    """The frames an AVI's idx1 index points at (offsets from the 'movi' list's fourcc), checked against the header."""
    assert data[:4] == b"RIFF" and data[8:12] == b"AVI " and struct.unpack("<I", data[4:8])[0] == len(data) - 8
    movi = data.index(b"movi")
    idx = data.index(b"idx1", movi)
    (size,) = struct.unpack("<I", data[idx + 4 : idx + 8])
    frames = []
    for at in range(idx + 8, idx + 8 + size, 16):
        fourcc, _, offset, length = struct.unpack("<4sIII", data[at : at + 16])
        assert fourcc == b"00dc" and data[movi + offset : movi + offset + 4] == b"00dc"
        frames.append(data[movi + offset + 8 : movi + offset + 8 + length])
    (total,) = struct.unpack("<I", data[data.index(b"avih") + 8 + 16 : data.index(b"avih") + 8 + 20])
    assert total == len(frames)
    return frames


def test_unknown_routes_and_bad_bodies(api: httpx.Client) -> None:
    assert api.get("/no-such-route").status_code == 404
    assert api.get("/execute").status_code == 405
    bad = api.post("/execute", content=b"not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and json.loads(bad.text)["status"] == "error"


def test_a_task_started_chrome_answers_devtools_through_a_preview_of_9222(server: Server, desktop: str) -> None:
    """As OSWorld's chrome setups do: google-chrome with DevTools on 1337, socat forwarding 9222 to it; the harness
    then reaches 9222 (on a desktop it is the user's port, not the platform's)."""
    base = f"{server.url}/v1/sandboxes/{desktop}/ports/{API_PORT}"
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as api:
        for command in (
            ["google-chrome", "--remote-debugging-port=1337"],
            "socat tcp-listen:9222,fork tcp:localhost:1337",
        ):
            assert api.post("/setup/launch", json={"command": command, "shell": False}).status_code == 200
    devtools = f"{server.url}/v1/sandboxes/{desktop}/ports/9222"
    with httpx.Client(base_url=devtools, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as cdp:

        def answers() -> bool:
            try:
                return cdp.get("/json/version").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(answers, within=60, what="Chromium's DevTools answering through the preview of 9222")
        version = cdp.get("/json/version").json()
        assert version["Browser"].startswith("Chrome/") and "webSocketDebuggerUrl" in version
