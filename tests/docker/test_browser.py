"""A browser sandbox: pages served from /workspace, downloads landing in /workspace."""

from __future__ import annotations

import asyncio

import pytest

from sandbox.errors import InvalidArgument
from tests.conftest import SandboxFactory

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
