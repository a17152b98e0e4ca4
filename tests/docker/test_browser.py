"""A browser sandbox: pages served from /workspace, downloads landing in /workspace."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from sandbox.errors import InvalidArgument
from tests.conftest import SandboxFactory
from tests.docker.screens import settled_screen

pytestmark = pytest.mark.docker

PAGE = """<!doctype html>
<html><head><title>Report page</title></head>
<body><h1 id="h">Quarterly report</h1>
<a id="dl" href="report.csv" download="downloaded-report.csv">download</a></body></html>
"""
REPORT = "quarter,revenue\nQ1,100\nQ2,140\n"


async def test_page_from_workspace_and_download_reaches_the_shell(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("browser")
    await sb.agent.write_file("/workspace/site/index.html", PAGE.encode())
    await sb.agent.write_file("/workspace/site/report.csv", REPORT.encode())
    server = await sb.agent.exec(
        "python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace/site >/tmp/http.log 2>&1 &",
        keep_background=True,
    )
    assert server.exit_code == 0

    for _ in range(50):
        if (await sb.agent.exec("python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8000/\")'")).ok:
            break
        await asyncio.sleep(0.1)
    page = await sb.agent.navigate("http://127.0.0.1:8000/index.html")
    assert page["title"] == "Report page"
    assert await sb.agent.evaluate("document.getElementById('h').textContent") == "Quarterly report"
    info = await sb.agent.browser_info()
    assert info["url"] == "http://127.0.0.1:8000/index.html"

    await sb.agent.evaluate("document.getElementById('dl').click()")
    content = ""
    for _ in range(100):
        result = await sb.agent.exec("cat /workspace/downloaded-report.csv")
        if result.exit_code == 0:
            content = result.stdout
            break
        await asyncio.sleep(0.1)
    assert content == REPORT


async def test_file_url_from_workspace_and_bad_input(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("browser")
    await sb.agent.write_file("/workspace/hello.html", b"<title>From file</title><p>hi</p>")
    page = await sb.agent.navigate("file:///workspace/hello.html")
    assert page["title"] == "From file"
    with pytest.raises(InvalidArgument):
        await sb.agent.navigate("javascript:alert(1)")
    with pytest.raises(InvalidArgument):
        await sb.agent.evaluate("throw new Error('boom')")
    shot = await sb.agent.screenshot()
    assert (shot.width, shot.height) == (1280, 800)


SWATCHES = """<!doctype html><title>Swatches</title>
<body style="margin:0;background:#fff"><div id="s" style="margin:40px;width:200px;height:60px;background:#c00"></div>
<p id="t" style="font:20px sans-serif;margin:40px">first words</p></body>"""


async def test_the_screenshot_follows_what_chromium_draws(make_sandbox: SandboxFactory) -> None:
    """The screenshot copies only the rows the X server saw drawn on: Chromium's own way of drawing must show."""
    sb = await make_sandbox("browser")
    await sb.agent.write_file("/workspace/swatches.html", SWATCHES.encode())
    await sb.agent.navigate("file:///workspace/swatches.html")
    changes = [
        "",  # the page as loaded
        "document.getElementById('s').style.background = '#0a0'",  # a small box
        "document.getElementById('t').textContent = 'other words, longer than the first ones'",  # a line of text
        "document.body.style.background = '#224'",  # the whole page
    ]
    reused = []
    for change in changes:
        if change:
            await sb.agent.evaluate(change)
        settled = await settled_screen(sb.agent, 1280, 800)
        meta, data = await sb.agent.request("screenshot", {"format": "png"}, deadline=10)
        shown = Image.open(io.BytesIO(data)).convert("RGB").tobytes()
        assert shown == settled, f"after {change or 'loading'!r}: the screenshot shows an old screen"
        reused.append(meta["bands_reused"])
    assert max(reused[1:3]) > 0, f"a small change copied every band: {reused}"
