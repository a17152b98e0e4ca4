"""The games' description, what ships into the images, the page clock script and page input (no engine needed)."""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

import pytest

from sandbox import games
from sandbox.agent import pages
from sandbox.agent.errors import AgentError
from sandbox.agent.page_input import click_events, key_events, parse_combo
from sandbox.backends.docker.images.recipe import load_recipe
from sandbox.wire.convert import validate_action


def test_every_game_has_its_page_and_the_page_api() -> None:
    files = dict(games.asset_files())
    common = files["lib/common.js"].decode()
    assert "window.game = Object.freeze({" in common and "state," in common and "seed(n)" in common
    for game in games.GAMES.values():
        page = files[f"{game.name}/index.html"].decode()
        refs = re.findall(r'(?:src|href)="([^"]+)"', page)
        for ref in refs:
            assert posixpath.normpath(f"{game.name}/{ref}") in files, f"{game.name}/index.html: {ref} is not shipped"
        assert refs.index("../lib/common.js") < refs.index(f"{game.name}.js"), "the shared script loads first"
        script = files[f"{game.name}/{game.name}.js"].decode()
        assert "expose(state, reset);" in script, f"{game.name} does not expose window.game"
        for field in ("score", "level", "over"):
            assert field in game.state_fields
            assert re.search(rf"\b{field}\b", script), f"{game.name}'s state() has no {field}"


def test_the_games_need_no_network() -> None:
    for name, content in games.asset_files():
        text = content.decode()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.IGNORECASE), f"{name} fetches a URL"
        assert "Math.random" not in text, f"{name} must use the seeded generator"
        assert "Date.now" not in text and "new Date" not in text, f"{name} must read time via performance.now()"


def test_urls_and_state_expressions() -> None:
    reflex = games.game("reflex")
    assert reflex.url() == "file:///opt/sandbox/games/reflex/index.html"
    assert reflex.url(seed=7, duration=5000) == "file:///opt/sandbox/games/reflex/index.html?seed=7&duration=5000"
    with pytest.raises(ValueError, match="no parameter"):
        games.game("tiles").url(seed=1, duration=5)
    with pytest.raises(KeyError, match="the games are tiles, reflex"):
        games.game("chess")
    assert games.state_expression() == "window.game.state()"
    assert games.state_expression("max_tile") == 'window.game.state()["max_tile"]'


def test_games_ship_in_the_browser_and_desktop_images_and_the_clock_with_the_agent() -> None:
    for kind in ("browser", "desktop", "terminal"):
        shipped = {name: content for name, content, _ in load_recipe(kind).files}
        game_files = {n for n in shipped if n.startswith("opt/sandbox/games/")}
        if kind in games.IMAGE_KINDS:
            assert game_files == {f"opt/sandbox/games/{n}" for n, _ in games.asset_files()}
            assert not any(n.endswith(".py") for n in game_files)
        else:
            assert not game_files
        assert shipped["opt/sandbox-agent/sandbox/agent/clock.js"] == pages.CLOCK_SCRIPT.read_bytes()


def test_the_browser_image_keeps_every_window_rendering() -> None:
    flags = Path("images/browser/rootfs/etc/chromium.d/zz-sandbox").read_text()
    for flag in ("--disable-backgrounding-occluded-windows", "--disable-background-timer-throttling"):
        assert flag in flags
    assert "CalculateNativeWinOcclusion" in flags


def test_the_clock_script_takes_its_configuration_and_replaces_every_time_source() -> None:
    source = pages.CLOCK_SCRIPT.read_text()
    assert len(pages._CONFIG.findall(source)) == 1
    config = json.dumps({"mode": "paused", "factor": 2.0, "frame_ms": pages.FRAME_MS})
    configured = pages._CONFIG.sub(lambda _: config, source)
    assert f"const CONFIG = {config};" in configured
    for name in ("setTimeout", "setInterval", "clearTimeout", "clearInterval", "requestAnimationFrame",
                 "cancelAnimationFrame", "requestIdleCallback", "Date"):  # fmt: skip
        assert f'define(window, "{name}"' in source, name
    assert 'define(performance, "now"' in source
    assert '"__clock"' in source
    for op in pages.CLOCK_OPS:
        assert re.search(rf"^\s+{op}\(", source, re.MULTILINE) or f"    {op},\n" in source, op


@pytest.mark.parametrize(
    ("combo", "key", "code", "key_code", "text", "modifiers"),
    [
        ("ArrowUp", "ArrowUp", "ArrowUp", 38, "", 0),
        ("Up", "ArrowUp", "ArrowUp", 38, "", 0),
        ("Return", "Enter", "Enter", 13, "\r", 0),
        ("a", "a", "KeyA", 65, "a", 0),
        ("shift+a", "A", "KeyA", 65, "A", 8),
        ("ctrl+a", "a", "KeyA", 65, "", 2),
        ("space", " ", "Space", 32, " ", 0),
        ("7", "7", "Digit7", 55, "7", 0),
        ("F5", "F5", "F5", 116, "", 0),
        ("+", "+", "", 0, "+", 0),
    ],
)
def test_keys_become_cdp_key_events(combo: str, key: str, code: str, key_code: int, text: str, modifiers: int) -> None:
    events = key_events(combo)
    main = [e for e in events if e["code"] == code and e["type"] != "keyUp"][-1]
    assert (main["key"], main["windowsVirtualKeyCode"], main.get("text", ""), main["modifiers"]) == (
        key,
        key_code,
        text,
        modifiers,
    )
    assert main["type"] == ("keyDown" if text else "rawKeyDown")
    downs = [e for e in events if e["type"] != "keyUp"]
    ups = [e for e in events if e["type"] == "keyUp"]
    assert [e["key"].lower() for e in ups] == [e["key"].lower() for e in reversed(downs)]


def test_bad_keys_and_clicks_are_refused() -> None:
    for bad in ("NoSuchKey", "a+b", "ctrl+", ""):
        with pytest.raises(AgentError):
            parse_combo(bad)
    with pytest.raises(AgentError, match="button"):
        click_events(1, 2, button="back")
    with pytest.raises(AgentError, match="count"):
        click_events(1, 2, count=4)
    double = click_events(10, 20, count=2)
    assert [(e["type"], e.get("clickCount")) for e in double] == [
        ("mouseMoved", None),
        ("mousePressed", 1),
        ("mouseReleased", 1),
        ("mousePressed", 2),
        ("mouseReleased", 2),
    ]


def test_page_actions_validate() -> None:
    assert validate_action({"type": "clock", "op": "speed", "factor": 4}).factor == 4  # type: ignore[union-attr]
    for bad in (
        {"type": "clock", "op": "step"},
        {"type": "clock", "op": "speed"},
        {"type": "clock", "op": "rewind"},
        {"type": "clock", "op": "step", "ms": -1},
        {"type": "page_open", "url": "about:blank", "clock": "frozen"},
        {"type": "page_open", "url": "about:blank", "factor": 0},
        {"type": "page_close"},
        {"type": "page_key", "key": ""},
        {"type": "page_click", "x": 1},
        {"type": "evaluate", "expression": "1", "page": ""},
    ):
        with pytest.raises(Exception, match="invalid action"):
            validate_action(bad)
