"""A fresh desktop shows a desktop: its first screenshot has the wallpaper and the panel (launchers and a clock), the
panel's terminal launcher opens a terminal above it, window lists and a snapshot's autostart list take the panel for
no app, and a spec can leave both out (``SANDBOX_DESKTOP_PLAIN=1``). The session is images/desktop/entrypoint.sh's.

The first screenshot of each test lands in /tmp/desktop-session-shots/ too, for a look while developing."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from PIL import Image

from sandbox.backends.agent_client import AgentClient
from sandbox.service.autostart import AUTOSTART_FILE, capture_autostart
from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker

WIDTH, HEIGHT = 1280, 800  # the default screen
PANEL_HEIGHT = 30
PANEL_BACKGROUND = (0x10, 0x17, 0x22)  # tint2rc's background 1
WALLPAPER_TOP = (0x2B, 0x4C, 0x6F)  # wallpaper.py's TOP
TERMINAL_LAUNCHER = (18, HEIGHT - PANEL_HEIGHT // 2)  # the first launcher icon
PANEL_MAX_RSS_KB = 40 * 1024
SHOTS = Path("/tmp/desktop-session-shots")


async def sh(agent: AgentClient, cmd: str, timeout: float = 30, *, keep_background: bool = False) -> str:
    result = await agent.exec(cmd, timeout=timeout, keep_background=keep_background)
    assert result.exit_code == 0, f"{cmd}: {result.exit_code} {result.stderr}"
    return result.stdout


async def first_screenshot(agent: AgentClient, name: str) -> Image.Image:
    data = (await agent.screenshot()).data
    SHOTS.mkdir(exist_ok=True)
    (SHOTS / f"{name}.png").write_bytes(data)
    return Image.open(io.BytesIO(data)).convert("RGB")


async def test_the_first_screenshot_shows_the_wallpaper_and_the_panel_whose_process_runs(
    make_sandbox: SandboxFactory,
) -> None:
    sb = await make_sandbox("desktop")
    image = await first_screenshot(sb.agent, "fresh-desktop")  # as soon as the sandbox is up, nothing waited for

    assert image.size == (WIDTH, HEIGHT)
    assert image.getcolors(maxcolors=1) is None, "the screen is one solid colour"
    assert image.getpixel((WIDTH // 2, 0)) == WALLPAPER_TOP
    above_panel = image.getpixel((WIDTH // 2, HEIGHT - PANEL_HEIGHT - 1))
    assert above_panel != WALLPAPER_TOP, "the wallpaper is a gradient"
    assert image.getpixel((WIDTH // 2, HEIGHT - PANEL_HEIGHT // 2)) == PANEL_BACKGROUND, "no panel on the first shot"
    launcher = image.crop((0, HEIGHT - PANEL_HEIGHT, 40, HEIGHT))
    assert len(launcher.getcolors(maxcolors=40 * PANEL_HEIGHT) or []) > 8, "no launcher icon drawn on the panel"

    assert (await sh(sb.agent, "pgrep -x tint2")).strip()
    geometry = await sh(sb.agent, "xdotool search --onlyvisible --classname '^tint2$' getwindowgeometry --shell")
    fields = dict(line.split("=", 1) for line in geometry.split())
    assert (fields["X"], fields["Y"], fields["WIDTH"], fields["HEIGHT"]) == (
        "0",
        str(HEIGHT - PANEL_HEIGHT),
        str(WIDTH),
        str(PANEL_HEIGHT),
    )
    workarea = await sh(sb.agent, "xprop -root _NET_WORKAREA")
    assert f"= 0, 0, {WIDTH}, {HEIGHT - PANEL_HEIGHT}," in workarea, "windows are placed over the panel"
    rss_kb = int((await sh(sb.agent, "awk '/^VmRSS/ {print $2}' /proc/$(pgrep -x tint2)/status")).strip())
    print(f"panel (tint2) RSS: {rss_kb / 1024:.1f} MiB")
    assert rss_kb < PANEL_MAX_RSS_KB


async def test_the_panels_terminal_launcher_opens_a_terminal_above_the_panel(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop")
    assert (await sb.agent.exec("xdotool search --onlyvisible --class xterm")).exit_code == 1, "a terminal already"
    await sb.agent.act({"type": "click", "x": TERMINAL_LAUNCHER[0], "y": TERMINAL_LAUNCHER[1]})
    found = await sh(sb.agent, "timeout 20 xdotool search --sync --onlyvisible --class xterm", timeout=40)
    window = found.split()[0]
    geometry = await sh(sb.agent, f"xdotool getwindowgeometry --shell {window}")
    fields = {k: int(v) for k, v in (line.split("=", 1) for line in geometry.split() if not line.startswith("S"))}
    assert fields["Y"] + fields["HEIGHT"] <= HEIGHT - PANEL_HEIGHT, f"the terminal is under the panel: {fields}"
    active = await sh(sb.agent, "xdotool getactivewindow")
    assert active.strip() == window, "the new terminal has not the focus"


async def test_window_searches_and_the_snapshot_autostart_list_take_the_panel_for_no_app(
    make_sandbox: SandboxFactory,
) -> None:
    sb = await make_sandbox("desktop")
    await sh(sb.agent, "xterm -T task-window -e sh -c 'sleep 600' >/dev/null 2>&1 &", keep_background=True)
    await sh(sb.agent, "timeout 20 xdotool search --sync --onlyvisible --name '^task-window$'", timeout=40)
    # What tasks' activate_window and the sample solutions search for finds the app, never the panel nor the
    # tooltip a pointer over a launcher shows.
    await sb.agent.act({"type": "move", "x": TERMINAL_LAUNCHER[0], "y": TERMINAL_LAUNCHER[1]})
    await asyncio.sleep(1)
    for flags in ("--name 'task'", "--class 'xterm'", "--classname 'xterm'", "--name 'Terminal'"):
        found = (await sb.agent.exec(f"xdotool search --onlyvisible {flags}")).stdout.split()
        names = [(await sh(sb.agent, f"xdotool getwindowname {w}")).strip() for w in found]
        assert "tint2" not in names, (flags, names)
    # A snapshot records the programs of the listed windows to start them again: the app's, not the panel's (which
    # the entrypoint starts itself), else a restored desktop would show two panels.
    assert await capture_autostart(sb.agent) == 1
    recorded = await sh(sb.agent, f"cat {AUTOSTART_FILE}")
    assert "task-window" in recorded and "tint2" not in recorded


async def test_a_plain_desktop_has_no_wallpaper_and_no_panel(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("desktop", env={"SANDBOX_DESKTOP_PLAIN": "1"})
    image = await first_screenshot(sb.agent, "plain-desktop")
    assert image.getcolors(maxcolors=1) == [(WIDTH * HEIGHT, (0, 0, 0))]
    assert (await sb.agent.exec("pgrep -x tint2")).exit_code == 1
    assert f"= 0, 0, {WIDTH}, {HEIGHT}," in await sh(sb.agent, "xprop -root _NET_WORKAREA")
