"""``sandbox task ...``: check task files, and run one episode of a task with a list of actions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from sandbox.cli.common import DEFAULT_TARGET, TargetOpt, TokenOpt, connect, console, err_console, fail
from sandbox.errors import SandboxError

task_app = typer.Typer(help="Tasks (OSWorld's task JSON): check files, run an episode.", no_args_is_help=True)


def _say(line: str) -> None:
    console.print(line, highlight=False, soft_wrap=True)


@task_app.command("check")
def check(
    files: Annotated[list[Path], typer.Argument(help="Task files (JSON).", exists=False)],
    fixtures: Annotated[
        Path | None,
        typer.Option(help="Folder with fixtures/ and fixtures.json for downloads [default: beside each file]."),
    ] = None,
) -> None:
    """Check task files: print each problem (an unsupported setup type, evaluator function or getter, by name;
    a step the sandbox kind cannot do; ...) and exit 1 if any file has one. A ``download`` URL with no fixture is a
    warning here (and an error when the task runs)."""
    from sandbox.tasks.errors import TaskError
    from sandbox.tasks.model import Task
    from sandbox.tasks.runtime import Fixtures

    failed = 0
    for path in files:
        try:
            shared = Fixtures.load(fixtures) if fixtures is not None else None
            task = Task.from_file(path, fixtures=shared)
        except TaskError as e:
            failed += 1
            _say(f"[red]{escape(str(path))}[/red]: {len(e.problems)} problem{'' if len(e.problems) == 1 else 's'}")
            for problem in e.problems:
                _say(f"  [red]error[/red]: {escape(problem)}")
            continue
        for warning in task.warnings():
            _say(f"{escape(str(path))}: [yellow]warning[/yellow]: {escape(warning)}")
        what = f"{task.id}, {task.sandbox.kind.value}, {len(task.config)} setup steps"
        _say(f"{escape(str(path))}: [green]ok[/green] ({escape(what)})")
    if failed:
        err_console.print(f"{failed} of {len(files)} task file{'' if len(files) == 1 else 's'} cannot run")
        raise typer.Exit(1)


@task_app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="The task file (JSON); fixtures/ and fixtures.json beside it.")],
    actions: Annotated[
        Path | None,
        typer.Option(
            "--actions",
            help='JSONL of actions, one a line (platform actions, {"type": "pyautogui", "code": ...}, '
            '{"type": "DONE"}); default: <task>.solution.jsonl beside the task when it exists, else none.',
        ),
    ] = None,
    keep: Annotated[bool, typer.Option(help="Keep the sandbox (print its id) instead of deleting it.")] = False,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Run one episode: create a sandbox of the task's kind, reset it to the task, apply the actions (stopping when
    the episode ends), evaluate, print the reward and delete the sandbox."""
    from sandbox.tasks.actions import load_actions
    from sandbox.tasks.model import Task

    try:
        task = Task.from_file(file)
        if actions is None:
            default = file.with_name(file.name.removesuffix(".json") + ".solution.jsonl")
            actions = default if default.is_file() else None
        steps = load_actions(actions) if actions is not None else []
        spec: dict[str, Any] = {"labels": {"sandbox.task": task.id[:63]}}
        if task.sandbox.image is not None:
            spec["image"] = task.sandbox.image
        if task.sandbox.screen is not None:
            spec["screen"] = task.sandbox.screen.model_dump()
        with connect(target, token) as client:
            sandbox = client.create(task.sandbox.kind.value, **spec)
            try:
                started = time.monotonic()
                obs = sandbox.reset(task=task)
                how = "setup ran" if obs.info.get("setup_ran") else "snapshot swapped in"
                _say(f"{sandbox.id}: reset to {escape(task.id)} in {time.monotonic() - started:.2f}s ({how})")
                display = task.sandbox.kind.has_display
                for index, action in enumerate(steps, 1):
                    obs = sandbox.step(action, screenshot=display)
                    _say(f"  step {index}: {action.type}")
                    if obs.done:
                        _say(f"  episode ended: {obs.info.get('reason')}")
                        break
                reward = sandbox.evaluate()
                _say(f"trajectory {obs.info.get('trajectory_id')}, {obs.info.get('steps')} steps")
            finally:
                if keep:
                    console.print(f"kept {sandbox.id}")
                else:
                    sandbox.close()
    except SandboxError as e:
        fail(e)
    _say(f"reward {reward:g}")
