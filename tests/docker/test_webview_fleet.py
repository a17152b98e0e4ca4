"""The web view's list page at fleet scale, in Debian's chromium: 300 sandboxes from the in-package fake backend
(``sandbox.testing.fleet``: one shared agent process serves them all), searched, filtered and paged, thumbnails
asked only for the cards on screen, and the control plane's CPU measured with the page open.

The fake fleet needs Chromium but no Docker. The last test does it again with 40 *real* sandboxes (38 terminals,
some with recent output, and 2 desktops for the thumbnails) on a real control plane of its own (owner
``<run owner>-wf40``; ``owned_by`` removes its containers): a correctness test with generous bounds, not a
benchmark; it prints what it measured. ``test_webview.py`` covers a real sandbox's own page (output, port links).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, Request, Route, sync_playwright

from tests.conftest import OWNER, RUN_ID, owned_by, require_image
from tests.docker.servers import ServerProcess, free_port, started
from tests.docker.test_webview import CHROMIUM, CHROMIUM_ARGS, Server, _wait_for, shoot
from tests.polling import wait_until

pytestmark = pytest.mark.docker

ALPHA_TOKEN = "fleet-alpha-token-0123456789"
BETA_TOKEN = "fleet-beta-token-0123456789"
FLEET = 300
PAGE_SIZE = 24
CPU_WINDOW_S = 10.0
CPU_BOUND = 0.10
"""Of one core, with the list page open and polling."""
REAL = 40
"""Real sandboxes: the oldest and the newest desktops, terminals between (every 5th with recent output)."""
CREATE_AT_ONCE = 6
REAL_FIRST_CARDS_S = 10.0
REAL_CPU_BOUND = 0.25
"""Of one core, with the page open: the lifecycle's health probes of the 40 (every 2 s) run meanwhile."""


def cpu_s(pid: int) -> float:
    """Process ``pid``'s CPU time so far (user + system), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Fleet:
    url: str
    pid: int
    made: dict[str, Any]

    def of(self, tenant: str) -> list[str]:
        return [i for i in self.made["ids"] if self.made["tenants"][i] == tenant]

    def cpu_s(self) -> float:
        """The server process's CPU time so far (user + system), in seconds."""
        return cpu_s(self.pid)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    workdir = Path(tempfile.mkdtemp(prefix="sbx-fleet-", dir="/tmp"))
    tokens = workdir / "tokens.json"
    tokens.write_text(json.dumps({ALPHA_TOKEN: "alpha", BETA_TOKEN: "beta"}))
    ready, sockets, port = workdir / "ready.json", workdir / "s", free_port()
    log = (workdir / "fleet.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "sandbox.testing.fleet", "--http-port", str(port), "--tokens-file", str(tokens),
            "--socket-root", str(sockets), "--sandboxes", str(FLEET), "--ready-file", str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def up() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the fleet server exited: {(workdir / 'fleet.log').read_text()[-3000:]}")
            return ready.exists() and ready.stat().st_size > 0

        started = time.monotonic()
        _wait_for("the fleet of 300", up, timeout=180, interval=0.2)
        print(f"fleet of {FLEET} fake sandboxes up in {time.monotonic() - started:.1f} s")
        yield Fleet(f"http://127.0.0.1:{port}", process.pid, json.loads(ready.read_text()))
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        leftovers = os.listdir(sockets) if sockets.exists() else []
        shutil.rmtree(workdir, ignore_errors=True)
        assert not leftovers, f"the fleet left agents behind: {leftovers}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


def _jpeg(size: tuple[int, int] = (320, 200), color: tuple[int, int, int] = (40, 90, 160)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="JPEG")
    return out.getvalue()


def shown(page: Page) -> list[str]:
    return list(page.eval_on_selector_all("#grid [data-sandbox]", "cards => cards.map(c => c.dataset.sandbox)"))


def on_screen(page: Page) -> set[str]:
    """The cards with a screen that intersect the viewport (with the page's 100 px margin)."""
    return set(
        page.evaluate(
            """() => Array.from(document.querySelectorAll('#grid [data-sandbox]')).filter((c) => {
                const r = c.getBoundingClientRect();
                return c.querySelector('img') && r.bottom > -100 && r.top < innerHeight + 100;
            }).map((c) => c.dataset.sandbox)"""
        )
    )


def poll(page: Page, what: str, check: Callable[[], Any], timeout: float = 10) -> Any:
    """``_wait_for`` that lets the browser's events (the thumbnail route) run while it waits."""
    give_up = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        page.wait_for_timeout(200)
    return result


def settle(page: Page, expected_range: str | None = None) -> None:
    """Wait for the list to answer the last change (the range text reads ``expected_range`` when given)."""
    if expected_range is not None:
        page.wait_for_function(
            "want => document.getElementById('range').textContent === want", arg=expected_range, timeout=10_000
        )
    page.wait_for_timeout(400)  # past the search box's debounce and one answer


def test_the_list_page_finds_the_one_in_300(fleet: Fleet, browser: Browser, tmp_path: Path) -> None:
    alpha = fleet.of("alpha")
    failed = [i for i in fleet.made["failed"] if fleet.made["tenants"][i] == "alpha"]
    kinds = fleet.made["kinds"]
    assert len(alpha) == 280 and failed

    context = browser.new_context(viewport={"width": 1500, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    thumbs: list[str] = []
    image = _jpeg()

    def thumbnail(route: Route) -> None:
        thumbs.append(route.request.url.split("/sandboxes/", 1)[1].split("/", 1)[0])
        route.fulfill(status=200, content_type="image/jpeg", body=image)  # the fake's screens have no pixels

    page.route("**/view/api/sandboxes/*/thumbnail*", thumbnail)

    # Load: the first page of 24, failing first, then the newest.
    started = time.monotonic()
    page.goto(f"{fleet.url}/view?token={ALPHA_TOKEN}")
    page.wait_for_function(f"document.querySelectorAll('#grid [data-sandbox]').length === {PAGE_SIZE}")
    load_s = time.monotonic() - started
    print(f"list page of {len(alpha)} sandboxes: first {PAGE_SIZE} cards in {load_s:.2f} s")
    assert load_s < 5
    assert page.locator("#count").inner_text() == "280 sandboxes"
    assert page.locator("#range").inner_text() == "1-24 of 280"
    first = shown(page)
    assert set(first[: len(failed)]) == set(failed), "failing sandboxes come first"
    assert page.locator(".card.failing").count() == len(failed)
    shoot(page, tmp_path, "fleet-list")

    # Thumbnails: only the cards on screen (the failing terminals fill the first rows), never the rest of the page.
    page.wait_for_timeout(1500)
    with_screen = {i for i in first if kinds[i] != "terminal"}
    ever = on_screen(page)
    assert set(thumbs) <= ever
    # Scroll to the first card with a screen (how far that is depends on what sits above the grid: the capacity
    # panel, the failing terminals' rows), not a fixed distance.
    first_with_screen = next(i for i in first if kinds[i] != "terminal")
    page.locator(f"[data-sandbox='{first_with_screen}']").scroll_into_view_if_needed()
    poll(page, "a thumbnail of a card scrolled to", lambda: thumbs)
    page.wait_for_timeout(1500)
    ever |= on_screen(page)
    assert set(thumbs) <= ever, set(thumbs) - ever
    assert len(thumbs) == len(set(thumbs)), "a card's thumbnail asked twice within its period"
    print(f"thumbnails asked: {len(thumbs)} of the page's {len(with_screen)} cards with a screen")
    page.mouse.wheel(0, 5000)
    poll(page, "thumbnails of the cards scrolled to", lambda: set(thumbs) == with_screen)
    asked_before = len(thumbs)
    page.wait_for_timeout(3000)
    assert len(thumbs) == asked_before, "the poll refetched thumbnails within their period"
    page.evaluate("window.scrollTo(0, 0)")

    # Search: a task id, a label, words that must all match; a terminal card's output tail.
    task_owner, task = next((i, t) for i, t in fleet.made["tasks"].items() if fleet.made["tenants"][i] == "alpha")
    page.fill("#search", task)
    settle(page, "1-1 of 1 (of 280)")
    assert shown(page) == [task_owner] and f"task {task}" in page.locator(f"[data-sandbox='{task_owner}']").inner_text()
    page.fill("#search", "run-3 w01")
    expected = [i for i in alpha if (n := fleet.made["ids"].index(i)) // 50 == 3 and f"w{n:04d}".startswith("w01")]
    settle(page, f"1-{min(PAGE_SIZE, len(expected))} of {len(expected)} (of 280)")
    worker = fleet.made["ids"].index(task_owner)
    page.fill("#search", f"worker=w{worker:04d}")
    settle(page, "1-1 of 1 (of 280)")
    talker, said = next((i, o) for i, o in fleet.made["outputs"].items() if fleet.made["tenants"][i] == "alpha")
    page.fill("#search", talker)
    settle(page, "1-1 of 1 (of 280)")
    tail = page.locator(f"[data-sandbox='{talker}'] pre.tail").inner_text()
    assert said in tail and "$ for n in 1 2 3" in tail, tail
    shoot(page, tmp_path, "fleet-search")
    page.fill("#search", "")
    settle(page, "1-24 of 280")

    # Filters: failing, then a kind; the address keeps them.
    page.select_option("#state", "failing")
    settle(page, f"1-{len(failed)} of {len(failed)} (of 280)")
    assert set(shown(page)) == set(failed) and "state=failing" in page.url
    page.select_option("#state", "")
    asked_so_far = len(thumbs)  # the page is scrolled to its top
    page.select_option("#kind", "desktop")
    desktops = [i for i in alpha if kinds[i] == "desktop"]
    settle(page, f"1-24 of {len(desktops)} (of 280)")
    assert all(kinds[i] == "desktop" for i in shown(page))
    page.wait_for_timeout(1500)
    visible, asked = on_screen(page), set(thumbs[asked_so_far:])
    assert asked and asked <= visible and len(visible) < PAGE_SIZE, (asked - visible, len(visible))
    page.select_option("#kind", "")
    settle(page, "1-24 of 280")

    # Paging shows the rest: every one of alpha's sandboxes, once.
    seen: list[str] = shown(page)
    while page.locator("#next").is_enabled():
        page.click("#next")
        start = len(seen) + 1
        settle(page, f"{start}-{min(start + PAGE_SIZE - 1, 280)} of 280")
        seen += shown(page)
    assert sorted(seen) == sorted(alpha) and len(seen) == len(set(seen))
    off_page = set(thumbs) - set(seen)
    assert not off_page
    page.goto(f"{fleet.url}/view")
    page.wait_for_function(f"document.querySelectorAll('#grid [data-sandbox]').length === {PAGE_SIZE}")

    # The control plane's CPU with the page open (and polling) for CPU_WINDOW_S.
    page.wait_for_timeout(2000)
    before, at = fleet.cpu_s(), time.monotonic()
    page.wait_for_timeout(CPU_WINDOW_S * 1000)
    busy = (fleet.cpu_s() - before) / (time.monotonic() - at)
    lists = page.evaluate("window.sandboxList.stats.listRequests")
    print(f"control plane CPU with the page open: {busy:.1%} of a core ({lists} list polls so far)")
    context.close()
    before, at = fleet.cpu_s(), time.monotonic()
    time.sleep(5)
    idle = (fleet.cpu_s() - before) / (time.monotonic() - at)
    print(f"control plane CPU with no page open: {idle:.1%} of a core")
    assert busy < CPU_BOUND, f"{busy:.1%} of a core with the page open"
    assert not errors, f"the page raised: {errors}"


def test_another_tenant_sees_only_its_own(fleet: Fleet, browser: Browser) -> None:
    beta = fleet.of("beta")
    page = browser.new_context(viewport={"width": 1500, "height": 900}).new_page()
    page.goto(f"{fleet.url}/view?token={BETA_TOKEN}")
    page.wait_for_selector(f"#count:has-text('{len(beta)} sandboxes')")
    assert set(shown(page)) == set(beta)
    page.fill("#search", fleet.of("alpha")[0])
    page.wait_for_selector("#no-match:not([hidden])")
    assert shown(page) == []
    page.context.close()


# ---------------------------------------------------------------------------- forty real sandboxes


@dataclass
class RealFleet:
    server: Server
    pid: int
    ids: list[str]
    """In the order they were made: ``ids[i]`` has the label ``worker=w<i:02d>``."""
    desktops: tuple[str, str]
    """The oldest and the newest: the last card of the second page and the first of the first."""
    outputs: dict[str, str]
    """Terminal id -> the line its command printed."""


def _create(url: str, index: int, kind: str) -> str:
    """A sandbox of tenant alpha, through its own client (the pool's threads share none)."""
    spec = {"kind": kind, "network": "none", "labels": {"fleet": "real40", "worker": f"w{index:02d}"}}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ALPHA_TOKEN}"}, timeout=120) as http:
        response = http.post("/v1/sandboxes", json=spec)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.fixture
def real_fleet(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[RealFleet]:
    """A real control plane on the Docker backend, owner ``<run owner>-wf40``, with ``REAL`` sandboxes of alpha's,
    the terminals made ``CREATE_AT_ONCE`` at a time; ``owned_by`` removes them all, whatever the test did."""
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    owner, sockets = f"{OWNER}-wf40", f"/run/sbx-test-{RUN_ID}-wf40"
    process = ServerProcess(tmp_path, owner=owner, socket_root=sockets, tokens={ALPHA_TOKEN: "alpha"})
    headers = {"Authorization": f"Bearer {ALPHA_TOKEN}"}
    with owned_by(docker_client, owner, sockets), started(process):
        url = process.http_url
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            server = Server(url, http, process.log)
            began = time.monotonic()
            oldest = _create(url, 0, "desktop")
            with ThreadPoolExecutor(CREATE_AT_ONCE) as pool:
                terminals = list(pool.map(lambda i: _create(url, i, "terminal"), range(1, REAL - 1)))
            newest = _create(url, REAL - 1, "desktop")
            made_s = time.monotonic() - began
            outputs = {sandbox_id: f"real-out-{i}" for i, sandbox_id in enumerate(terminals, 1) if i % 5 == 0}
            for sandbox_id, line in outputs.items():
                assert server.exec(sandbox_id, f"echo {line}")["exit_code"] == 0
            ids = [oldest, *terminals, newest]

            def all_running() -> bool:
                listed = server.ok(http.get("/v1/sandboxes"))["sandboxes"]
                return sorted(s["id"] for s in listed if s["state"] == "running") == sorted(ids)

            wait_until(all_running, 30, f"the {REAL} sandboxes listed running")
            print(f"{REAL} real sandboxes ({REAL - 2} terminals, {CREATE_AT_ONCE} at a time) made in {made_s:.1f} s")
            yield RealFleet(server, process.pid, ids, (oldest, newest), outputs)


@pytest.mark.timeout(180)
def test_the_list_page_with_40_real_sandboxes(real_fleet: RealFleet, browser: Browser, tmp_path: Path) -> None:
    fleet, (oldest, newest) = real_fleet, real_fleet.desktops
    context = browser.new_context(viewport={"width": 1500, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    thumbs: list[str] = []

    def asked(request: Request) -> None:
        if "/thumbnail" in request.url:
            thumbs.append(request.url.split("/sandboxes/", 1)[1].split("/", 1)[0])

    page.on("request", asked)

    # Load: the first page of 24 (health probed for each card on it), within a generous bound.
    started_at = time.monotonic()
    page.goto(f"{fleet.server.url}/view?token={ALPHA_TOKEN}")
    page.wait_for_function(f"document.querySelectorAll('#grid [data-sandbox]').length === {PAGE_SIZE}", timeout=60_000)
    first_s = time.monotonic() - started_at
    paint_ms = page.evaluate("window.sandboxList.stats.firstPaintMs")
    print(f"list page of {REAL} real sandboxes: first {PAGE_SIZE} cards in {first_s:.2f} s (first paint {paint_ms} ms)")
    assert first_s < REAL_FIRST_CARDS_S, f"the first cards took {first_s:.1f} s"
    assert page.locator("#count").inner_text() == f"{REAL} sandboxes"
    assert page.locator("#range").inner_text() == f"1-{PAGE_SIZE} of {REAL}"

    # Thumbnails: the newest desktop's (on screen) is asked and shown; the oldest's (on the next page) is not.
    card = f"[data-sandbox='{newest}'] img"
    page.wait_for_function(f'document.querySelector("{card}")?.naturalWidth > 0', timeout=30_000)
    page.wait_for_timeout(1500)
    ever = on_screen(page)
    assert newest in ever and set(thumbs) <= ever, (set(thumbs) - ever, newest in ever)
    assert oldest not in thumbs, "a thumbnail asked for a card of another page"
    shoot(page, tmp_path, "fleet-real-list")

    # Search: a terminal with recent output shows its tail on its card; a label finds its one sandbox.
    talker, said = next(iter(fleet.outputs.items()))
    page.fill("#search", talker)
    settle(page, f"1-1 of 1 (of {REAL})")
    tail = page.locator(f"[data-sandbox='{talker}'] pre.tail")
    poll(page, "the output tail on the card", lambda: said in tail.inner_text())
    assert f"$ echo {said}" in tail.inner_text(), tail.inner_text()
    shoot(page, tmp_path, "fleet-real-tail")
    page.fill("#search", "worker=w07")
    settle(page, f"1-1 of 1 (of {REAL})")
    assert shown(page) == [fleet.ids[7]]
    page.fill("#search", "")
    settle(page, f"1-{PAGE_SIZE} of {REAL}")

    # Paging: every one of the 40, once; the second page's thumbnails only as its cards come on screen.
    seen = shown(page)
    while page.locator("#next").is_enabled():
        page.click("#next")
        start = len(seen) + 1
        settle(page, f"{start}-{min(start + PAGE_SIZE - 1, REAL)} of {REAL}")
        seen += shown(page)
    assert sorted(seen) == sorted(fleet.ids) and len(seen) == len(set(seen)), (len(seen), len(set(seen)))
    assert oldest in shown(page)
    page.wait_for_timeout(1500)
    ever |= on_screen(page)
    before_scroll = oldest in thumbs
    assert set(thumbs) <= ever, set(thumbs) - ever
    page.mouse.wheel(0, 5000)
    poll(page, "the oldest desktop's thumbnail, scrolled to", lambda: oldest in thumbs, timeout=20)
    ever |= on_screen(page)
    assert set(thumbs) <= ever, set(thumbs) - ever
    print(f"thumbnails asked: {len(thumbs)} ({sorted(set(thumbs))}); the oldest's before scrolling: {before_scroll}")

    # The control plane's CPU with the page open (and polling) for CPU_WINDOW_S, then with none.
    page.goto(f"{fleet.server.url}/view")
    page.wait_for_function(f"document.querySelectorAll('#grid [data-sandbox]').length === {PAGE_SIZE}")
    page.wait_for_timeout(2000)
    before, at = cpu_s(fleet.pid), time.monotonic()
    page.wait_for_timeout(CPU_WINDOW_S * 1000)
    busy = (cpu_s(fleet.pid) - before) / (time.monotonic() - at)
    lists = page.evaluate("window.sandboxList.stats.listRequests")
    print(f"control plane CPU with the page open: {busy:.1%} of a core ({lists} list polls)")
    context.close()
    before, at = cpu_s(fleet.pid), time.monotonic()
    time.sleep(5)
    idle = (cpu_s(fleet.pid) - before) / (time.monotonic() - at)
    print(f"control plane CPU with no page open: {idle:.1%} of a core (the lifecycle's probes of {REAL})")
    assert busy < REAL_CPU_BOUND, f"{busy:.1%} of a core with the page open"
    assert not errors, f"the page raised: {errors}"


# --------------------------------------------------------------------------- an android sandbox's page, in Chromium


def test_an_android_page_shows_screenshots_and_sends_taps_swipes_and_keys(fleet: Fleet, browser: Browser) -> None:
    """The page's side of an android sandbox (the server's side is tests/unit/api/web/test_android.py): told
    ``live: screenshots``, it opens no VNC websocket, shows the screen it fetches, and with control on turns a click
    into a tap at the device's pixel, a drag into a swipe and its keys into key steps, also while the next
    screenshot loads (the element's natural size then reads 0 in Chromium: a drag begun then once started at the
    corner). The fleet has no android sandbox (no emulator here), so the feed of one of its sandboxes is rewritten to
    say android."""
    sandbox_id = fleet.of("alpha")[0]
    minted = httpx.post(f"{fleet.url}/v1/sandboxes/{sandbox_id}/tickets", json={"control": True},
                        headers={"authorization": f"Bearer {ALPHA_TOKEN}"}, timeout=30)  # fmt: skip
    assert minted.status_code in (200, 201), minted.text
    sent: list[dict[str, Any]] = []
    sockets: list[str] = []
    screen = _jpeg((540, 960), (20, 120, 60))

    def feed(route: Route) -> None:
        body = route.fetch().json()
        body["sandbox"].update(kind="android", live="screenshots", has_display=True)
        route.fulfill(json=body)

    def inputs(route: Route) -> None:
        sent.append(json.loads(route.request.post_data or "{}"))
        route.fulfill(json={"ok": True, "done": False})

    held: list[Route] = []  # once the first screen is shown, every later one waits here: nothing redraws meanwhile

    def screens(route: Route) -> None:
        if held or route.request.url.endswith("/loading.jpg"):
            held.append(route)
        else:
            route.fulfill(body=screen, content_type="image/jpeg")

    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    try:
        page.on("websocket", lambda ws: sockets.append(ws.url))
        page.route(f"**/view/{sandbox_id}/actions", feed)
        page.route(f"**/view/{sandbox_id}/screen", screens)
        page.route("**/loading.jpg", screens)
        page.route(f"**/view/{sandbox_id}/input", inputs)
        page.goto(f"{fleet.url}{minted.json()['url']}")
        poll(page, "the screen", lambda: page.evaluate("document.getElementById('screen-image')?.naturalWidth") == 540)
        assert "no VNC server" in page.inner_text("#vnc-status")
        page.check("#control")
        image = page.locator("#screen-image")
        box = image.bounding_box()
        assert box is not None
        scale = 540 / box["width"]
        page.evaluate("document.getElementById('screen-image').src = '/loading.jpg'")  # the next screen, loading
        assert page.evaluate("document.getElementById('screen-image').naturalWidth") == 0
        assert image.bounding_box() == box, "the element kept its place while the next screen loads"
        page.mouse.click(box["x"] + 100, box["y"] + 200)
        page.mouse.move(box["x"] + 50, box["y"] + 400)
        page.mouse.down()
        page.mouse.move(box["x"] + 50, box["y"] + 100, steps=5)
        page.mouse.up()
        page.click("#screen-keys [data-key=back]")
        poll(page, "three inputs", lambda: len(sent) == 3)
        tap, swipe, key = sent
        assert tap == {"type": "tap", "x": round(100 * scale), "y": round(200 * scale)}, tap
        assert swipe["type"] == "swipe" and swipe["y"] > swipe["to_y"], swipe
        assert key == {"type": "key", "key": "back"}
        assert not [url for url in sockets if url.endswith("/vnc") or "/vnc?" in url], sockets
    finally:
        page.close()
