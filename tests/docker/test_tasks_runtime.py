"""Every sample task in tasks/, through real sandboxes: its reference solution scores 1, doing nothing scores 0.

The task runtime is the service's own (:class:`sandbox.service.task_runtime.AgentRuntime`) over the sandbox's agent."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox.backends.agent_client import AgentClient
from sandbox.errors import InvalidArgument
from sandbox.models import Action, SandboxKind
from sandbox.service.task_runtime import AgentRuntime
from sandbox.tasks import (
    EvaluationResult,
    Fixtures,
    Task,
    TaskError,
    evaluate,
    expand,
    load_actions,
    run_setup,
    translate,
)
from tests.conftest import SandboxFactory

pytestmark = pytest.mark.docker

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
TASK_FILES = sorted(TASKS_DIR.glob("*.json"))
TIMINGS: dict[str, dict[str, float]] = {}
CHROME_TAB_TASKS = sorted(p for p in (TASKS_DIR / "osworld").glob("*.json") if '"chrome_open_tabs"' in p.read_text())
"""OSWorld-format tasks that launch Chrome on a desktop and open its tabs over DevTools (the demo runs them too)."""


async def perform(agent: AgentClient, action: Action) -> None:
    if action.type == "exec":
        result = await agent.exec(
            action.cmd,
            timeout=action.timeout,
            cwd=action.cwd,
            env=action.env or None,
            session=action.session,
            keep_background=action.keep_background,
        )
        assert result.ok, f"solution step {action.cmd!r} failed: {result}"
    elif action.type == "navigate":
        await agent.navigate(action.url, timeout=action.timeout)
    elif action.type == "evaluate":
        await agent.evaluate(action.expression)
    else:
        await agent.act(action.model_dump(mode="json", exclude_none=True))


async def episode(make_sandbox: SandboxFactory, task: Task, actions: list[Action], label: str) -> EvaluationResult:
    """A fresh sandbox for the task, its setup, the actions, the evaluation."""
    started = time.monotonic()
    spec: dict[str, Any] = {}
    if task.sandbox.image:
        spec["image"] = task.sandbox.image
    if task.sandbox.screen:
        spec["screen"] = task.sandbox.screen.model_dump()
    sb = await make_sandbox(task.sandbox.kind.value, **spec)
    runtime = AgentRuntime(sb.agent, sb.spec)
    created = time.monotonic()
    fixtures = task.fixtures or Fixtures.load(TASKS_DIR)
    await run_setup(task, runtime, fixtures)
    set_up = time.monotonic()
    last: str | None = None
    for action in actions:
        expanded = expand(action, screen=(runtime.screen_width, runtime.screen_height))
        if isinstance(expanded, str):
            last = expanded
            if expanded in ("DONE", "FAIL"):
                break
            continue
        for step in expanded:
            await perform(sb.agent, step)
    acted = time.monotonic()
    result = await evaluate(task, runtime, fixtures, last_action=last)
    TIMINGS[f"{task.id} {label}"] = {
        "create": created - started,
        "setup": set_up - created,
        "actions": acted - set_up,
        "evaluate": time.monotonic() - acted,
    }
    return result


def test_there_are_enough_sample_tasks() -> None:
    tasks = [Task.from_file(p) for p in TASK_FILES]
    kinds = {t.sandbox.kind for t in tasks}
    assert len(tasks) >= 16 and kinds == {SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.BROWSER}
    assert sum(t.infeasible for t in tasks) >= 1
    osworld_keys = {"id", "snapshot", "instruction", "source", "config", "trajectory", "related_apps", "evaluator"}
    assert sum(set(json.loads(p.read_text())) == osworld_keys for p in TASK_FILES) >= 3
    for path in TASK_FILES:
        assert path.with_suffix(".solution.jsonl").is_file(), f"{path.name} has no reference solution"
        assert not Task.from_file(path).warnings(), path.name


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
async def test_reference_solution_scores_1_and_doing_nothing_scores_0(make_sandbox: SandboxFactory, path: Path) -> None:
    await _solved_scores_1_and_idle_scores_0(make_sandbox, path)


@pytest.mark.parametrize("path", CHROME_TAB_TASKS, ids=lambda p: p.stem)
async def test_chrome_tabs_open_on_a_desktop_right_after_chrome_is_launched(
    make_sandbox: SandboxFactory, path: Path
) -> None:
    """chrome_open_tabs right after a ``launch`` of google-chrome: it waits for the DevTools port, and the tab's load
    is checked in the sandbox (a desktop's agent drives no browser). Two desktops at once, as the reference test."""
    await _solved_scores_1_and_idle_scores_0(make_sandbox, path)


async def _solved_scores_1_and_idle_scores_0(make_sandbox: SandboxFactory, path: Path) -> None:
    """The task's reference solution and an episode of no action, in two sandboxes at once."""
    task = Task.from_file(path)
    solution = load_actions(path.with_suffix(".solution.jsonl"))
    solved, idle = await asyncio.gather(
        episode(make_sandbox, task, solution, "solved"), episode(make_sandbox, task, [], "idle")
    )
    assert solved.reward == 1.0, f"the reference solution scored {solved.reward}: {solved.model_dump()}"
    assert idle.reward == 0.0, f"doing nothing scored {idle.reward}: {idle.model_dump()}"


async def test_infeasible_scores_only_on_fail_and_fail_zeroes_a_feasible_task(make_sandbox: SandboxFactory) -> None:
    infeasible = Task.from_file(TASKS_DIR / "terminal-infeasible-gpu.json")
    feasible = Task.from_file(TASKS_DIR / "terminal-make-report-dir.json")
    sb = await make_sandbox("terminal")
    runtime = AgentRuntime(sb.agent, sb.spec)
    fixtures = Fixtures.load(TASKS_DIR)
    assert (await evaluate(infeasible, runtime, fixtures, last_action="DONE")).reward == 0.0
    assert (await evaluate(infeasible, runtime, fixtures, last_action="FAIL")).reward == 1.0
    await sb.agent.exec("mkdir -p /workspace/reports/2024 && echo done > /workspace/reports/2024/summary.txt")
    assert (await evaluate(feasible, runtime, fixtures, last_action="DONE")).reward == 1.0
    assert (await evaluate(feasible, runtime, fixtures, last_action="FAIL")).reward == 0.0


async def test_a_failing_setup_step_is_named(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("terminal")
    runtime = AgentRuntime(sb.agent, sb.spec)
    task = Task.from_dict(
        {
            "id": "bad-download",
            "instruction": "-",
            "sandbox": {"kind": "terminal"},
            "config": [
                {"type": "execute", "parameters": {"command": "true"}},
                {"type": "download", "parameters": {"files": [{"url": "https://x.test/a.txt", "path": "/proc/a.txt"}]}},
            ],
            "evaluator": {"func": "infeasible"},
        }
    )
    fixtures = Fixtures(urls={"https://x.test/a.txt": TASKS_DIR / "fixtures" / "by-id" / "names.txt"})
    # The sandbox refuses the write: the runtime's InvalidArgument (a TaskError is one too), naming step and path.
    with pytest.raises(InvalidArgument, match=r"config\[1\] \(download\).*/proc/a\.txt"):
        await run_setup(task, runtime, fixtures)
    with pytest.raises(TaskError, match=r"config\[1\] \(download\).*https://x\.test/a\.txt"):
        await run_setup(task, runtime, Fixtures())


async def test_a_pyautogui_click_lands_where_it_says(make_sandbox: SandboxFactory) -> None:
    sb = await make_sandbox("browser")
    page = (
        "<body style='margin:0;height:100vh'><script>window.clicks = [];"
        "addEventListener('mousedown', e => clicks.push([e.screenX, e.screenY, e.button, e.detail]));</script>"
    )
    await sb.agent.write_file("/workspace/click.html", page.encode())
    await sb.agent.navigate("file:///workspace/click.html")
    for action in translate("pyautogui.click(400, 500)\npyautogui.rightClick(x=640, y=300)", screen=(1280, 800)):
        await perform(sb.agent, action)
    assert await sb.agent.evaluate("window.clicks") == [[400, 500, 0, 1], [640, 300, 2, 1]]


async def test_chrome_profile_getters_read_the_browsers_profile(make_sandbox: SandboxFactory) -> None:
    from sandbox.tasks.getters import get
    from sandbox.tasks.runtime import EvalContext

    sb = await make_sandbox("browser")
    runtime = AgentRuntime(sb.agent, sb.spec)
    ctx = EvalContext(runtime, Fixtures())
    await sb.agent.write_file("/workspace/a.html", b"<title>Page A</title>")
    await sb.agent.navigate("file:///workspace/a.html")
    assert await get(ctx, "active_url_from_accessTree", {}) == "file:///workspace/a.html"
    assert await get(ctx, "open_tabs_info", {}) == [{"title": "Page A", "url": "file:///workspace/a.html"}]
    info = await get(ctx, "active_tab_info", {})
    assert info["title"] == "Page A" and "<title>Page A</title>" in info["content"]
    assert await get(ctx, "default_search_engine", {}) == "Google"
    assert isinstance(await get(ctx, "chrome_font_size", {}), dict)
    assert await get(ctx, "bookmarks", {}) in ([], {})  # no bookmarks written yet
    assert await get(ctx, "chrome_language", {}) == "en-US"


async def test_browser_getters_evaluate_in_the_chrome_a_desktop_task_launched(make_sandbox: SandboxFactory) -> None:
    """On a desktop the agent drives no browser: browser_evaluate and active_tab_info ask the Chrome that the task's
    setup launched (DevTools on OSWorld's 1337), over its DevTools from inside the sandbox."""
    from sandbox.tasks.getters import get
    from sandbox.tasks.runtime import EvalContext

    sb = await make_sandbox("desktop")
    runtime = AgentRuntime(sb.agent, sb.spec)
    page = b"<title>Quarterly Report</title><script>window.report = {total: 42, rows: ['a', 'b']};</script>"
    await runtime.write_file("/home/sandbox/Desktop/report.html", page)
    chrome, url = ["google-chrome", "--remote-debugging-port=1337"], "file:///home/user/Desktop/report.html"
    task = Task.from_dict(
        {
            "id": "desktop-evaluate",
            "instruction": "-",
            "sandbox": {"kind": "desktop"},
            "config": [
                {"type": "launch", "parameters": {"command": chrome}},
                {"type": "chrome_open_tabs", "parameters": {"urls_to_open": [url]}},  # /home/sandbox links there
            ],
            "evaluator": {"func": "infeasible"},
        }
    )
    await run_setup(task, runtime, Fixtures())
    ctx = EvalContext(runtime, Fixtures())
    assert await get(ctx, "browser_evaluate", {"expression": "document.title"}) == "Quarterly Report"
    later = "new Promise(done => setTimeout(() => done(window.report), 50))"  # a promise: its value, as JSON
    assert await get(ctx, "browser_evaluate", {"expression": later}) == {"total": 42, "rows": ["a", "b"]}
    info = await get(ctx, "active_tab_info", {})
    assert info["url"] == url and info["title"] == "Quarterly Report"
    assert "window.report = {total: 42" in info["content"]
    with pytest.raises(InvalidArgument, match="JavaScript error: Error: no report today"):
        await get(ctx, "browser_evaluate", {"expression": "(() => { throw new Error('no report today'); })()"})


def test_print_timings() -> None:
    """Not a check: the phases of each episode above (run with -s to see them)."""
    for name, phases in sorted(TIMINGS.items()):
        print(f"{name:48s} " + " ".join(f"{k} {v:5.2f}s" for k, v in phases.items()))
