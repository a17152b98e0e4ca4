"""The developer web view in a real browser: Debian's chromium, headless, driven by Playwright, against a
real `sandbox server` process and real desktop containers.

Screenshots of every page land in the test's tmp dir and, for a look while developing, in
/tmp/webview-shots/.
"""

from __future__ import annotations

import io
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from PIL import Image, ImageChops, ImageStat
from playwright.sync_api import Browser, Page, sync_playwright

from tests.conftest import OWNER, RUN_ID
from tests.docker.servers import ServerProcess, started

pytestmark = pytest.mark.docker

TOKEN = "webview-alpha-token-0123456789"
OTHER_TOKEN = "webview-beta-token-0123456789"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]  # fmt: skip
SHOTS = Path("/tmp/webview-shots")
WIDTH, HEIGHT = 1024, 768
GREEN = (0, 255, 0)
T = TypeVar("T")


def _wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.2) -> Any:
    give_up = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def _settled(read: Callable[[], T | None], ready: Callable[[T], bool]) -> Callable[[], T | None]:
    """A check for ``_wait_for``: ``read()``'s value once it is ready and two reads in a row agree."""
    last: list[T | None] = [None]

    def check() -> T | None:
        now = read()
        settled = now is not None and ready(now) and now == last[0]
        last[0] = now
        return now if settled else None

    return check


@dataclass
class Server:
    url: str
    http: httpx.Client
    log: Path

    def ok(self, response: httpx.Response) -> Any:
        assert response.status_code < 300, f"{response.status_code}: {response.text}"
        return response.json() if response.content else None

    def ticket(self, sandbox_id: str, *, control: bool = False) -> dict[str, Any]:
        return dict(self.ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/tickets", json={"control": control})))

    def exec(self, sandbox_id: str, cmd: str, *, keep_background: bool = False) -> dict[str, Any]:
        body = {"cmd": cmd, "keep_background": keep_background}
        return dict(self.ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/exec", json=body)))

    def step(self, sandbox_id: str, action: dict[str, Any]) -> dict[str, Any]:
        return dict(self.ok(self.http.post(f"/v1/sandboxes/{sandbox_id}/step", json={"action": action})))

    def screenshot(self, sandbox_id: str) -> Image.Image:
        response = self.http.get(f"/v1/sandboxes/{sandbox_id}/screenshot", params={"format": "png"})
        assert response.status_code == 200, response.text
        return Image.open(io.BytesIO(response.content)).convert("RGB")

    def pointer(self, sandbox_id: str) -> tuple[int, int]:
        out = self.exec(sandbox_id, "xdotool getmouselocation --shell")["stdout"]
        values = dict(line.split("=", 1) for line in out.split())
        return int(values["X"]), int(values["Y"])

    def dropped_input(self, sandbox_id: str, *, since: int) -> list[int]:
        """How many input messages each view-only VNC session of ``sandbox_id`` dropped, for the sessions that ended
        after the log's first ``since`` bytes: the server logs it when such a session ends (if it dropped any)."""
        with self.log.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        pattern = rf"view-only VNC session of sandbox {re.escape(sandbox_id)}: dropped (\d+) input messages"
        return [int(n) for n in re.findall(pattern, text)]


@pytest.fixture(scope="module")
def server(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real control plane, its containers labelled with this test run's owner."""
    process = ServerProcess(
        tmp_path_factory.mktemp("webview-server"), owner=OWNER, socket_root=f"/run/sbx-test-{RUN_ID}",
        tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"},
    )  # fmt: skip
    with started(process):
        http = httpx.Client(base_url=process.http_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        try:
            yield Server(process.http_url, http, process.log)
        finally:
            http.close()


@pytest.fixture(scope="module")
def sandboxes(server: Server) -> Iterator[dict[str, str]]:
    """A desktop and a terminal sandbox of tenant alpha, deleted at the end."""
    made: dict[str, str] = {}
    try:
        for kind, spec in (("desktop", {"screen": {"width": WIDTH, "height": HEIGHT}}), ("terminal", {})):
            info = server.ok(
                server.http.post("/v1/sandboxes", json={"kind": kind, "labels": {"test": "webview"}, **spec})
            )
            made[kind] = info["id"]
        yield made
    finally:
        for sandbox_id in made.values():
            response = server.http.delete(f"/v1/sandboxes/{sandbox_id}")
            assert response.status_code in (204, 404), response.text


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"


def shoot(page: Page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path))
    SHOTS.mkdir(exist_ok=True)
    shutil.copy(path, SHOTS / path.name)
    return path


def open_window(server: Server, sandbox_id: str, title: str, args: str) -> tuple[int, int, int, int]:
    """Start an xterm and return its window's geometry (x, y, width, height) once it is mapped and placed.

    xterm's window exists (1x1 at 0,0) before it is mapped, and the window manager moves it when it
    adds the frame: only a visible window whose geometry reads the same twice is where a click lands.
    """
    server.exec(sandbox_id, f"xterm -name {title} {args} >/dev/null 2>&1 &", keep_background=True)

    def geometry() -> tuple[int, int, int, int] | None:
        out = server.exec(
            sandbox_id, f"xdotool search --onlyvisible --classname '^{title}$' getwindowgeometry --shell"
        )["stdout"]
        values = dict(line.split("=", 1) for line in out.split() if "=" in line)
        if not {"X", "Y", "WIDTH", "HEIGHT"} <= values.keys():
            return None
        return int(values["X"]), int(values["Y"]), int(values["WIDTH"]), int(values["HEIGHT"])

    found: tuple[int, int, int, int] = _wait_for(f"window {title}", _settled(geometry, lambda g: g[2] > 1 and g[3] > 1))
    x, y, w, h = found

    def pixels() -> bytes:
        return server.screenshot(sandbox_id).crop((x, y, x + w, y + h)).tobytes()

    _wait_for(f"window {title} drawn", _settled(pixels, lambda _: True))  # its pixels read the same twice
    return found


def connect(page: Page, server: Server, url: str) -> None:
    page.goto(server.url + url)
    page.wait_for_function("window.sandboxView && window.sandboxView.connected", timeout=20_000)


def canvas_region(page: Page, box: tuple[int, int, int, int]) -> Image.Image:
    """The framebuffer pixels noVNC drew, at the framebuffer's own resolution."""
    x, y, w, h = box
    data = page.evaluate(
        """([x, y, w, h]) => {
            const canvas = document.querySelector('#screen canvas');
            return Array.from(canvas.getContext('2d').getImageData(x, y, w, h).data);
        }""",
        [x, y, w, h],
    )
    return Image.frombytes("RGBA", (w, h), bytes(data)).convert("RGB")


def mean_difference(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference per channel, 0..255."""
    assert a.size == b.size
    return float(sum(ImageStat.Stat(ImageChops.difference(a, b)).mean) / 3)


def colour_box(image: Image.Image, colour: tuple[int, int, int]) -> tuple[int, int, int, int] | None:
    """The bounding box of the pixels of exactly ``colour``."""
    exact = ImageChops.difference(image, Image.new("RGB", image.size, colour)).convert("L")
    return exact.point(lambda v: 255 if v == 0 else 0).getbbox()


def mean_colour(image: Image.Image) -> tuple[float, ...]:
    return tuple(ImageStat.Stat(image).mean)


def click_canvas(page: Page, x: int, y: int) -> None:
    """Click at framebuffer coordinates (x, y), whatever the canvas's scale on the page."""
    canvas = page.locator("#screen canvas")
    box = canvas.bounding_box()
    assert box is not None
    width = page.evaluate("document.querySelector('#screen canvas').width")
    scale = box["width"] / width
    page.mouse.click(box["x"] + (x + 0.5) * scale, box["y"] + (y + 0.5) * scale)


# ---------------------------------------------------------------------------- the acceptance


def test_the_view_renders_the_sandboxs_frames(
    server: Server, sandboxes: dict[str, str], page: Page, tmp_path: Path
) -> None:
    sandbox_id = sandboxes["desktop"]
    open_window(server, sandbox_id, "green", "-bg '#00ff00' -fg black -geometry 60x16+40+60 -e sh -c 'sleep 3600'")

    def green_box() -> tuple[int, int, int, int] | None:
        """Where the API's screenshot shows the green window."""
        return colour_box(server.screenshot(sandbox_id), GREEN)

    # Once two shots agree, the WM has placed it.
    left, top, right, bottom = _wait_for(
        "the green window in the API's screenshots",
        _settled(green_box, lambda box: box[2] - box[0] >= 300 and box[3] - box[1] >= 150),
    )
    region = (left + 10, top + 20, right - left - 20, bottom - top - 30)  # clear of the cursor and the edges
    x, y, w, h = region
    expected = server.screenshot(sandbox_id).crop((x, y, x + w, y + h))
    assert mean_difference(expected, Image.new("RGB", expected.size, GREEN)) < 1

    connect(page, server, server.ticket(sandbox_id)["url"] + "&fit=0")
    size = page.evaluate(
        "[document.querySelector('#screen canvas').width, document.querySelector('#screen canvas').height]"
    )
    assert size == [WIDTH, HEIGHT]
    seen = _wait_for(
        "the window on the canvas", lambda: mean_difference(canvas_region(page, region), expected) < 6 or None
    )
    assert seen
    drawn = canvas_region(page, region)
    assert all(abs(c - g) < 12 for c, g in zip(mean_colour(drawn), GREEN, strict=True)), mean_colour(drawn)
    # A region with the window's edge and the desktop around it matches too, not just a flat colour.
    edge = (max(0, left - 30), max(0, top - 40), 120, 90)
    api_edge = server.screenshot(sandbox_id).crop((edge[0], edge[1], edge[0] + edge[2], edge[1] + edge[3]))
    assert mean_difference(canvas_region(page, edge), api_edge) < 8
    assert page.locator("#vnc-status").inner_text().startswith("VNC: connected")
    assert page.locator("#control").is_disabled(), "a view ticket must not offer control"
    shoot(page, tmp_path, "sandbox-view-only")


def test_take_control_drives_the_sandbox_and_view_only_does_not(
    server: Server, sandboxes: dict[str, str], browser: Browser, tmp_path: Path
) -> None:
    sandbox_id = sandboxes["desktop"]
    server.exec(sandbox_id, "rm -f /workspace/typed.txt; touch /workspace/typed.txt")
    x, y, w, h = open_window(
        server, sandbox_id, "typing", "-bg white -fg black -geometry 50x10+560+80 -e sh -c 'cat > /workspace/typed.txt'"
    )
    target = (x + w // 2, y + h // 2)
    park = (900, 700)
    server.step(sandbox_id, {"type": "move", "x": park[0], "y": park[1]})
    assert server.pointer(sandbox_id) == park

    # View only: even a page that turns its own view-only switch off reaches nothing.
    log_size = server.log.stat().st_size
    viewer = browser.new_context(viewport={"width": 1500, "height": 900}).new_page()
    connect(viewer, server, server.ticket(sandbox_id)["url"])
    viewer.evaluate("window.sandboxView.rfb.viewOnly = false")
    click_canvas(viewer, *target)
    keys = "from the viewer\n"
    viewer.keyboard.type(keys)
    # The session ends cleanly (the socket closes after what was sent), and the server logs then how many input
    # messages it dropped: once that is all the page sent (a key press and release a character, the click's press
    # and release at least), every one has passed the server's filter and none is still on its way.
    viewer.evaluate("window.sandboxView.rfb.disconnect()")
    sent = 2 * len(keys) + 2
    _wait_for(
        f"the server's word that the view-only session's {sent}+ input messages were dropped",
        lambda: any(n >= sent for n in server.dropped_input(sandbox_id, since=log_size)),
    )
    assert server.pointer(sandbox_id) == park, "a view-only session moved the pointer"
    assert server.exec(sandbox_id, "cat /workspace/typed.txt")["stdout"] == "", "a view-only session typed"
    viewer.context.close()

    # Control: the switch on, the click and the keys arrive.
    driver = browser.new_context(viewport={"width": 1500, "height": 900}).new_page()
    connect(driver, server, server.ticket(sandbox_id, control=True)["url"])
    switch = driver.locator("#control")
    assert switch.is_enabled()
    switch.check()
    click_canvas(driver, *target)
    _wait_for("the pointer to reach the click", lambda: server.pointer(sandbox_id) == target)
    driver.keyboard.type("from the page\n")
    typed = _wait_for("the keys to reach xterm", lambda: server.exec(sandbox_id, "cat /workspace/typed.txt")["stdout"])
    assert typed == "from the page\n"
    _wait_for("the move to show in recent actions", lambda: driver.locator("#actions li").count() > 0)
    assert "move" in driver.locator("#actions").inner_text()
    time.sleep(0.5)  # nothing is asserted after it: the page paints its last frame for the screenshot kept for a look
    shoot(driver, tmp_path, "sandbox-control")
    driver.context.close()


def test_without_a_valid_ticket_the_view_does_not_open(
    server: Server, sandboxes: dict[str, str], page: Page, tmp_path: Path
) -> None:
    desktop, terminal = sandboxes["desktop"], sandboxes["terminal"]
    other_ticket = server.ticket(terminal)["ticket"]
    good = server.ticket(desktop)["ticket"]

    # The page: no ticket, a forged one, another sandbox's.
    for ticket, why in ((None, "needs a ticket"), ("forged.ticket", "not valid"), (other_ticket, "another sandbox")):
        response = page.goto(f"{server.url}/view/{desktop}" + (f"?ticket={ticket}" if ticket else ""))
        assert response is not None and response.status == 401
        assert why in page.locator("#message").inner_text()
        assert page.locator("#screen").count() == 0
    shoot(page, tmp_path, "sandbox-refused")

    # The websocket: refused before it opens, unless the ticket is for this sandbox.
    page.goto(f"{server.url}/view/static/style.css")
    probe = """async (url) => await new Promise((resolve) => {
        const ws = new WebSocket(url, ['binary']);
        ws.binaryType = 'arraybuffer';
        ws.onmessage = (e) => { resolve('rfb:' + new TextDecoder().decode(e.data).slice(0, 12)); ws.close(); };
        ws.onclose = (e) => resolve('closed:' + e.code);
    })"""
    ws = f"ws://127.0.0.1:{server.url.rsplit(':', 1)[1]}/view/{desktop}/vnc"
    assert page.evaluate(probe, f"{ws}") == "closed:1006"
    assert page.evaluate(probe, f"{ws}?ticket=forged.ticket") == "closed:1006"
    assert page.evaluate(probe, f"{ws}?ticket={other_ticket}") == "closed:1006"
    assert page.evaluate(probe, f"{ws}?ticket={good}") == "rfb:RFB 003.008\n"

    # The feeds, too; and another tenant gets no ticket for this sandbox.
    assert server.http.get(f"/view/{desktop}/actions", params={"ticket": other_ticket}).status_code == 401
    assert server.http.get(f"/view/{desktop}/actions", headers={"X-Sandbox-Ticket": good}).status_code == 200
    beta = {"Authorization": f"Bearer {OTHER_TOKEN}"}
    assert server.http.post(f"/v1/sandboxes/{desktop}/tickets", json={}, headers=beta).status_code == 404
    assert (
        server.http.post(f"/v1/sandboxes/{desktop}/tickets", json={}, headers={"Authorization": ""}).status_code == 401
    )


def test_the_list_page_shows_the_tenants_sandboxes_live(
    server: Server, sandboxes: dict[str, str], page: Page, browser: Browser, tmp_path: Path
) -> None:
    desktop, terminal = sandboxes["desktop"], sandboxes["terminal"]
    server.step(terminal, {"type": "exec", "cmd": "echo hello from a step"})

    response = page.goto(f"{server.url}/view")
    assert response is not None and response.status == 401 and page.locator("input[name=token]").count() == 1
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/view")  # the token left the address bar
    cookie = next(c for c in page.context.cookies() if c["name"] == "sandbox_view_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and TOKEN not in cookie["value"]

    for sandbox_id in (desktop, terminal):
        page.wait_for_selector(f"[data-sandbox='{sandbox_id}']")
    card = page.locator(f"[data-sandbox='{desktop}']")
    assert "desktop" in card.inner_text() and "running" in card.inner_text() and "age" in card.inner_text()
    page.wait_for_function(
        f"document.querySelector(\"[data-sandbox='{desktop}'] img\")?.naturalWidth > 0", timeout=20_000
    )
    natural = card.locator("img").evaluate("img => [img.naturalWidth, img.naturalHeight]")
    assert 0 < natural[0] <= 320 and 0 < natural[1] <= 200
    page.wait_for_selector(f"[data-sandbox='{desktop}'] .dot.ok")
    shoot(page, tmp_path, "list")

    # It refreshes itself: a new sandbox shows up without a reload, and goes away when deleted.
    extra = server.ok(server.http.post("/v1/sandboxes", json={"kind": "terminal", "labels": {"test": "webview"}}))["id"]
    try:
        page.wait_for_selector(f"[data-sandbox='{extra}']", timeout=10_000)
    finally:
        server.http.delete(f"/v1/sandboxes/{extra}")
    page.wait_for_selector(f"[data-sandbox='{extra}']", state="detached", timeout=10_000)

    # The session trades for a ticket: the terminal's page shows its commands.
    page.click(f"[data-sandbox='{terminal}'] a.btn.primary")
    page.wait_for_url(f"{server.url}/view/{terminal}?ticket=*")
    page.wait_for_selector("#transcript .cmd")
    assert "echo hello from a step" in page.locator("#transcript").inner_text()
    page.wait_for_function("document.getElementById('terminal-log').textContent.length > 0", timeout=10_000)
    shoot(page, tmp_path, "sandbox-terminal")

    # Another tenant's list does not show alpha's sandboxes.
    other = browser.new_context().new_page()
    other.goto(f"{server.url}/view?token={OTHER_TOKEN}")
    other.wait_for_selector("#count:has-text('0 sandboxes')")
    assert other.locator("[data-sandbox]").count() == 0
    other.context.close()


def test_a_terminal_card_shows_its_output_and_the_page_its_ports(
    server: Server, sandboxes: dict[str, str], page: Page, browser: Browser, tmp_path: Path
) -> None:
    """Real terminals: a card shows the tail of what its commands printed, not a blank; the sandbox page lists the
    listening ports, and with a control ticket each links to a working preview."""
    terminal = sandboxes["terminal"]
    server.exec(terminal, "printf 'first line\\nsecond line\\n'; echo to-stderr >&2")
    server.exec(terminal, "echo the last words; exit 3")
    server.exec(
        terminal,
        "mkdir -p /workspace/site && echo 'served by http.server' > /workspace/site/index.html && cd /workspace/site "
        "&& python3 -m http.server 8123 --bind 127.0.0.1 >/tmp/site.log 2>&1 &",
        keep_background=True,
    )

    page.goto(f"{server.url}/view?token={TOKEN}")
    page.fill("#search", terminal)
    page.wait_for_function(
        "id => Array.from(document.querySelectorAll('#grid [data-sandbox]')).map(c => c.dataset.sandbox).join() === id",
        arg=terminal,
        timeout=10_000,
    )
    tail = page.locator(f"[data-sandbox='{terminal}'] pre.tail")
    _wait_for("the output tail on the card", lambda: "the last words" in tail.inner_text())
    text = tail.inner_text()
    for expected in ("$ printf", "second line", "to-stderr", "$ echo the last words; exit 3", "[exit 3]"):
        assert expected in text, text
    shoot(page, tmp_path, "list-terminal-tail")

    # The sandbox page: a view ticket lists the ports without links; a control ticket links each to its preview.
    viewer = browser.new_context().new_page()
    viewer.goto(server.url + server.ticket(terminal)["url"])
    viewer.wait_for_selector("#ports li[data-port='8123']", timeout=20_000)
    assert viewer.locator("#ports li[data-port='8123'] a").count() == 0
    assert "control" in viewer.locator("#ports-hint").inner_text()
    viewer.wait_for_function("document.getElementById('output').textContent.includes('the last words')")
    viewer.context.close()

    page.goto(server.url + server.ticket(terminal, control=True)["url"])
    link = page.locator("#ports li[data-port='8123'] a")
    link.wait_for(timeout=20_000)
    href = link.get_attribute("href")
    assert href is not None and href.startswith(f"/v1/sandboxes/{terminal}/ports/8123/?ticket=")
    shoot(page, tmp_path, "sandbox-ports")
    with page.context.expect_page() as opened:
        link.click()
    preview = opened.value
    preview.wait_for_load_state()
    assert "served by http.server" in preview.content()
    preview.close()
