"""Browser games with time control: several game pages in one real browser sandbox, each with its own clock,
input and screenshot; a paused clock holds, a step advances exactly, a speed factor runs faster than real time,
a seeded game replays exactly; and the same through the control plane's actions."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sandbox.backends.agent_client import AgentClient
from sandbox.client import AsyncClient
from sandbox.errors import InvalidArgument, NotFound
from sandbox.games import GAMES, STATE_JS
from sandbox.models import Action, PageKey
from sandbox.service.task_runtime import AgentRuntime
from sandbox.tasks import Fixtures, Task, evaluate, expand, load_actions, run_setup
from tests.conftest import OWNER, RUN_ID, SandboxFactory
from tests.docker.servers import ServerProcess, started

pytestmark = pytest.mark.docker

TILES, REFLEX = GAMES["tiles"], GAMES["reflex"]
ARENA_BG = (0x1F, 0x24, 0x30)  # reflex's canvas
BOARD_BG = (0xBB, 0xAD, 0xA0)  # tiles' board
CANVAS_CORNER = (24, 74)  # inside the canvas of both games, off every cell and target margin


async def state(agent: AgentClient, page: str) -> dict[str, Any]:
    value = await agent.evaluate(STATE_JS, page=page)
    assert isinstance(value, dict)
    return value


def pixel(png: bytes, xy: tuple[int, int]) -> tuple[int, ...]:
    with Image.open(io.BytesIO(png)) as image:
        return tuple(image.convert("RGB").getpixel(xy))


async def play_reflex(agent: AgentClient, page: str, *, rounds: int, step_ms: float = 400) -> dict[str, Any]:
    """A scripted policy: step the clock, click the oldest live target, again; the final state."""
    for _ in range(rounds):
        await agent.clock("step", page=page, ms=step_ms)
        targets = (await state(agent, page))["targets"]
        if targets:
            await agent.page_click(targets[0]["x"], targets[0]["y"], page=page)
    return await state(agent, page)


async def test_two_game_pages_in_one_sandbox_play_apart(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    tiles = (await agent.page_open(TILES.url(seed=3), clock="paused"))["page"]
    reflex = (await agent.page_open(REFLEX.url(seed=7), clock="paused"))["page"]
    listed = {p["page"]: p for p in await agent.page_list()}
    assert listed[tiles]["title"] == "Tiles" and listed[reflex]["title"] == "Reflex"
    assert listed[tiles]["clock"] and listed[reflex]["clock"]

    tiles_start = await state(agent, tiles)
    for key in ("ArrowLeft", "ArrowUp", "Right", "s", "ArrowDown", "a"):  # DOM and X keysym names, and WASD
        await agent.page_key(key, page=tiles)
    played = await play_reflex(agent, reflex, rounds=8)
    tiles_now = await state(agent, tiles)

    assert tiles_now["moves"] > 0 and tiles_now["board"] != tiles_start["board"]
    assert played["hits"] >= 2 and played["score"] > 0 and played["time_ms"] == 8 * 400
    assert tiles_now["time_ms"] == 0, "the tiles page's clock is its own: paused, never stepped"
    assert (tiles_now["game"], played["game"]) == ("tiles", "reflex")

    tiles_shot = await agent.page_screenshot(page=tiles)
    reflex_shot = await agent.page_screenshot(page=reflex)
    assert tiles_shot.data != reflex_shot.data
    assert pixel(tiles_shot.data, CANVAS_CORNER) == BOARD_BG
    assert pixel(reflex_shot.data, CANVAS_CORNER) == ARENA_BG
    # The screen shows one window at a time; the pages' screenshots do not depend on which.
    assert (await agent.screenshot()).width == 1280

    closed = await agent.page_close(tiles)
    assert tiles not in {p["page"] for p in closed["pages"]}
    with pytest.raises(NotFound):
        await agent.page_key("ArrowUp", page=tiles)


async def test_a_paused_clock_holds_for_10_s_and_steps_exactly(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    page = (await agent.page_open(REFLEX.url(seed=5), clock="paused"))["page"]
    await agent.clock("step", page=page, ms=700)  # the first target is up (at 500 ms)
    before, clock_before = await state(agent, page), await agent.clock("state", page=page)
    shot_before = await agent.page_screenshot(page=page)
    assert before["targets"] and before["time_ms"] == 700 and clock_before["now_ms"] == 700

    await asyncio.sleep(10)  # ten seconds of wall time, clock paused
    after = await state(agent, page)
    assert after == before, "a paused game must not move"
    assert (await agent.clock("state", page=page))["now_ms"] == 700
    assert (await agent.page_screenshot(page=page)).data == shot_before.data

    stepped = await agent.clock("step", page=page, ms=1000)
    now = await state(agent, page)
    assert stepped["now_ms"] == 1700 and stepped["mode"] == "paused"
    assert now["time_ms"] - before["time_ms"] == 1000  # exactly
    first = before["targets"][0]
    if now["targets"] and now["targets"][0]["id"] == first["id"]:
        assert first["expires_in_ms"] - now["targets"][0]["expires_in_ms"] == 1000
    # Fractional steps add up exactly too, and many small steps equal one big one.
    for _ in range(8):
        await agent.clock("step", page=page, ms=12.5)
    assert (await state(agent, page))["time_ms"] == 1800


CLOCK_PROBE = """
window.log = [];
const at = (name) => log.push([name, performance.now()]);
setTimeout(() => at("t10a"), 10);
setTimeout(() => at("t10b"), 10);
setTimeout(() => { at("t0"); setTimeout(() => at("t0-nested"), 0); }, 0);
let runs = 0;
const every = setInterval(() => { at("iv25"); if (++runs === 3) clearInterval(every); }, 25);
requestAnimationFrame((ts) => { at("raf"); log.push(["raf-ts", ts]); requestAnimationFrame(() => at("raf2")); });
clearTimeout(setTimeout(() => at("never"), 5));
window.d0 = Date.now();
"""


async def test_the_clock_runs_timers_and_frames_in_order(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    page = (await agent.page_open("data:text/html,<title>clock</title>", clock="paused"))["page"]
    await agent.evaluate(CLOCK_PROBE, page=page)
    stepped = await agent.clock("step", page=page, ms=100)
    frame = 1000 / 60
    assert await agent.evaluate("log", page=page) == [
        ["t0", 0], ["t0-nested", 0], ["t10a", 10], ["t10b", 10], ["raf", frame], ["raf-ts", frame],
        ["iv25", 25], ["raf2", 2 * frame], ["iv25", 50], ["iv25", 75],
    ]  # fmt: skip
    assert stepped["ran"] == 9 and stepped["timers"] == 0 and stepped["now_ms"] == 100
    assert await agent.evaluate("Date.now() - d0", page=page) == 100
    # A new document of the page starts with the clock as it was set last.
    await agent.clock("speed", page=page, factor=3)
    await agent.navigate("data:text/html,<title>again</title>", page=page)
    again = await agent.clock("state", page=page)
    assert (again["mode"], again["factor"], again["now_ms"]) == ("paused", 3, 0)


async def test_speed_runs_faster_than_real_time(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    url = REFLEX.url(seed=1, duration=600_000, misses=1000)
    page = (await agent.page_open(url, clock="running", factor=4))["page"]
    outer = time.monotonic()
    first = await agent.clock("state", page=page)
    inner = time.monotonic()
    await asyncio.sleep(1.5)
    inner_end = time.monotonic()
    second = await agent.clock("state", page=page)
    outer_end = time.monotonic()
    advanced = second["now_ms"] - first["now_ms"]
    assert second["mode"] == "running" and second["factor"] == 4
    assert 4 * (inner_end - inner) * 1000 - 50 <= advanced <= 4 * (outer_end - outer) * 1000 + 50
    game = await state(agent, page)
    assert game["misses"] > 0 and not game["over"], "the game's own timers ran at that speed"

    held = (await agent.clock("pause", page=page))["now_ms"]
    await asyncio.sleep(0.5)
    assert (await agent.clock("state", page=page))["now_ms"] == held
    await agent.clock("speed", page=page, factor=0.5)
    await agent.clock("resume", page=page)
    await asyncio.sleep(1.0)
    slow = (await agent.clock("pause", page=page))["now_ms"] - held
    assert 300 <= slow <= 700


async def test_a_seeded_game_replays_exactly(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    pages = [(await agent.page_open(REFLEX.url(seed=seed), clock="paused"))["page"] for seed in (11, 11, 12)]
    a, b, other = await asyncio.gather(*(play_reflex(agent, page, rounds=12, step_ms=350) for page in pages))
    assert a == b
    assert a["hits"] > 0 and a["time_ms"] == 12 * 350
    assert other != a

    tiles = [(await agent.page_open(TILES.url(seed=seed), clock="paused"))["page"] for seed in (4, 4)]
    for page in tiles:
        for key in ["ArrowDown", "ArrowLeft", "ArrowDown", "ArrowRight"] * 5:
            await agent.page_key(key, page=page)
    one, two = [await state(agent, page) for page in tiles]
    assert one == two and one["moves"] > 5
    # game.seed(n) and game.reset() start over, reproducibly.
    reseeded = await agent.evaluate("game.seed(4)", page=tiles[0])
    again = await agent.evaluate("game.reset()", page=tiles[0])
    assert reseeded == again and reseeded["moves"] == 0 and reseeded["seed"] == 4


async def test_page_errors_are_clear(make_sandbox: SandboxFactory) -> None:
    agent = (await make_sandbox("browser")).agent
    with pytest.raises(InvalidArgument, match="no platform clock"):
        await agent.clock("pause")  # the first page was not opened by page_open
    with pytest.raises(NotFound, match="no page"):
        await agent.page_close("0123456789ABCDEF")
    only = (await agent.page_list())[0]["page"]
    with pytest.raises(InvalidArgument, match="last page"):
        await agent.page_close(only)
    page = (await agent.page_open(TILES.url(), clock="none"))["page"]
    with pytest.raises(InvalidArgument, match="unknown key"):
        await agent.page_key("NoSuchKey", page=page)
    with pytest.raises(InvalidArgument, match="cannot open"):
        await agent.page_open("file:///opt/sandbox/games/nothing-here.html")
    assert {"file", "about"} <= {p["url"].split(":")[0] for p in await agent.page_list()}
    assert len(await agent.page_list()) == 2, "a page that failed to open is closed again"


# ---------------------------------------------------------------------------- through the control plane


@pytest.fixture(scope="module")
def control_plane(backend: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path_factory.mktemp("games-cp"), owner=OWNER, socket_root=f"/run/sbx-test-{RUN_ID}")
    with started(server):
        yield server


async def test_game_actions_through_the_sdk(control_plane: ServerProcess) -> None:
    async with AsyncClient(control_plane.grpc_target) as client:
        sandbox = await client.create(kind="browser", labels={"test": "games"})
        try:
            opened = await sandbox.step(
                {"type": "page_open", "url": REFLEX.url(seed=7), "clock": "paused"}, screenshot=True
            )
            page = opened.value["page"]
            assert opened.title == "Reflex" and opened.value["clock"]["mode"] == "paused"
            assert opened.screenshot is not None and pixel(opened.screenshot.data, CANVAS_CORNER) == ARENA_BG
            stepped = await sandbox.step({"type": "clock", "op": "step", "ms": 1000, "page": page})
            assert stepped.value["clock"]["now_ms"] == 1000
            game = (await sandbox.step({"type": "evaluate", "expression": STATE_JS, "page": page})).value
            target = game["targets"][0]
            clicked = await sandbox.step(
                {"type": "page_click", "x": target["x"], "y": target["y"], "page": page}, screenshot=True
            )
            assert clicked.screenshot is not None and clicked.screenshot.height < 800  # the page's, not the screen's
            after = (await sandbox.step({"type": "evaluate", "expression": STATE_JS, "page": page})).value
            assert after["hits"] == 1 and after["time_ms"] == 1000

            tiles = (await sandbox.step({"type": "page_open", "url": TILES.url(seed=3)})).value["page"]
            await sandbox.step({"type": "page_key", "key": "ArrowLeft", "page": tiles})
            moved = (await sandbox.step({"type": "evaluate", "expression": "game.state().moves", "page": tiles})).value
            assert moved == 1  # seed 3 starts with tiles a left slide moves
            closed = await sandbox.step({"type": "page_close", "page": tiles})
            assert tiles not in {p["page"] for p in closed.value["pages"]}
            with pytest.raises(InvalidArgument, match="ms"):
                await sandbox.step({"type": "clock", "op": "step", "page": page})
        finally:
            await sandbox.close()


# ---------------------------------------------------------------------------- the game tasks (tasks/games)

GAME_TASKS = sorted((Path(__file__).resolve().parents[2] / "tasks" / "games").glob("*.json"))


async def game_episode(make_sandbox: SandboxFactory, task: Task, actions: list[Action]) -> float:
    sb = await make_sandbox("browser")
    agent, runtime = sb.agent, AgentRuntime(sb.agent, sb.spec)
    await run_setup(task, runtime, Fixtures())
    last = None
    for action in actions:
        expanded = expand(action, screen=(1280, 800))
        if isinstance(expanded, str):
            last = expanded
            break
        for step in expanded:
            if isinstance(step, PageKey):
                await agent.page_key(step.key, page=step.page)
            else:
                assert step.type == "exec", f"these tasks' solutions use page_key and exec, not {step.type}"
                result = await agent.exec(step.cmd, timeout=step.timeout)
                assert result.ok, f"solution step failed: {result}"
    return (await evaluate(task, runtime, Fixtures(), last_action=last)).reward


def test_there_is_a_task_per_game() -> None:
    tasks = [Task.from_file(path) for path in GAME_TASKS]
    assert {next(g for g in GAMES if f"/games/{g}/" in json.dumps(t.model_dump(mode="json"))) for t in tasks} == set(
        GAMES
    )
    for path in GAME_TASKS:
        task = Task.from_file(path)
        assert not task.problems() and not task.warnings(), path.name
        assert len(load_actions(path.with_suffix(".solution.jsonl"))) <= task.limits.max_steps, path.name


@pytest.mark.parametrize("path", GAME_TASKS, ids=lambda p: p.stem)
async def test_game_task_solution_scores_1_and_doing_nothing_0(make_sandbox: SandboxFactory, path: Path) -> None:
    task = Task.from_file(path)
    solution = load_actions(path.with_suffix(".solution.jsonl"))
    solved, idle = await asyncio.gather(
        game_episode(make_sandbox, task, solution), game_episode(make_sandbox, task, [])
    )
    assert (solved, idle) == (1.0, 0.0)
