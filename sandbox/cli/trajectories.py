"""``sandbox trajectory ...``: list, show, export to Parquet, replay and delete recorded episodes, and save their
media (screen recordings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.cli.common import DEFAULT_TARGET, TargetOpt, TokenOpt, connect, console, err_console, fail
from sandbox.errors import SandboxError

trajectory_app = typer.Typer(
    help="Recorded episodes: list, show, export to Parquet, replay to the same reward.", no_args_is_help=True
)


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@trajectory_app.command("ls")
def list_trajectories(
    task_id: Annotated[str | None, typer.Option("--task", help="Only this task's.")] = None,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Your recorded episodes, oldest first."""
    try:
        with connect(target, token) as client:
            found = client.trajectories.list(task_id=task_id)
    except SandboxError as e:
        fail(e)
        return
    table = Table(box=None)
    for column in ("id", "task", "kind", "steps", "reason", "reward", "frames"):
        table.add_column(column, no_wrap=column in ("id", "task"))
    for t in found:
        table.add_row(t.id, t.task_id or "-", t.kind.value, str(t.steps), t.reason or "-", _reward(t.reward),
                      str(t.frames))  # fmt: skip
    console.print(table)


@trajectory_app.command("show")
def show(trajectory_id: str, target: TargetOpt = DEFAULT_TARGET, token: TokenOpt = None) -> None:
    """A trajectory's summary and its steps (actions as JSON)."""
    try:
        with connect(target, token) as client:
            trajectory = client.trajectories.get(trajectory_id)
    except SandboxError as e:
        fail(e)
        return
    info = trajectory.info
    console.print(
        f"{info.id}: task {escape(str(info.task_id))} on {info.sandbox_id} ({info.kind.value}), {info.steps} steps, "
        f"{info.reason or 'not ended'}, reward {_reward(info.reward)}",
        highlight=False,
    )
    for step in trajectory.steps:
        action = "reset" if step.action is None else json.dumps(step.action, ensure_ascii=False)
        frame = f"  [dim]{step.frame.sha256[:12]}[/dim]" if step.frame else ""
        console.print(f"  {step.index:>3}  {escape(action)}{frame}", highlight=False, soft_wrap=True)
    for ref in info.media:
        console.print(
            f"  media {ref.sha256}  {ref.content_type}  {ref.size} bytes  {escape(ref.name)}",
            highlight=False,
            soft_wrap=True,
        )
    for warning in info.warnings:
        console.print(f"  [yellow]warning[/yellow]: {escape(warning)}", highlight=False, soft_wrap=True)


@trajectory_app.command("media")
def media(
    trajectory_id: str,
    sha256: Annotated[
        str | None, typer.Argument(help="The medium's SHA-256 (or a prefix) [default: the only one].")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Where to save it [default: its name, in this directory].")
    ] = None,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """A trajectory's media (screen recordings): listed with neither SHA256 nor -o, else one saved."""
    try:
        with connect(target, token) as client:
            refs = client.trajectories.get(trajectory_id).info.media
            if output is None and sha256 is None:
                for ref in refs:
                    console.print(
                        f"{ref.sha256}  {ref.content_type}  {ref.size} bytes  {escape(ref.name)}",
                        highlight=False,
                        soft_wrap=True,
                    )
                if not refs:
                    err_console.print(f"trajectory {trajectory_id} keeps no media")
                return
            found = [r for r in refs if sha256 is None or r.sha256.startswith(sha256.lower())]
            if len(found) != 1:
                what = "no medium" if not found else f"{len(found)} media"
                named = f" starting with {sha256!r}" if sha256 else ""
                err_console.print(f"trajectory {trajectory_id} keeps {what}{named}: name one by its SHA-256")
                raise typer.Exit(1)
            ref = found[0]
            data = client.trajectories.media(trajectory_id, ref.sha256)
    except SandboxError as e:
        fail(e)
        return
    path = output if output is not None else Path(Path(ref.name).name or ref.sha256)  # no directory of its own
    path.write_bytes(data)
    console.print(f"{len(data)} bytes ({ref.content_type}) to {path}", highlight=False, soft_wrap=True)


@trajectory_app.command("export")
def export(
    trajectory_ids: Annotated[list[str] | None, typer.Argument(help="Trajectory ids [default: --all].")] = None,
    output: Annotated[Path, typer.Option("-o", "--output", help="The Parquet file of the steps.")] = Path(
        "trajectories.parquet"
    ),
    frames: Annotated[
        str, typer.Option(help="Screenshots: 'table' (<out>.frames.parquet, once each), 'inline' or 'none'.")
    ] = "table",
    all_: Annotated[bool, typer.Option("--all", help="Every trajectory you can see.")] = False,
    task_id: Annotated[str | None, typer.Option("--task", help="With --all: only this task's.")] = None,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Export trajectories to Parquet (one row per step), loadable with pandas.read_parquet or datasets."""
    from sandbox.trajectories.export import to_parquet

    if frames not in ("table", "inline", "none"):
        err_console.print("--frames must be table, inline or none")
        raise typer.Exit(2)
    if not trajectory_ids and not all_:
        err_console.print("name trajectories to export, or --all")
        raise typer.Exit(2)
    try:
        with connect(target, token) as client:
            ids = list(trajectory_ids or []) or [t.id for t in client.trajectories.list(task_id=task_id)]
            trajectories = (client.trajectories.get(i) for i in ids)
            result = to_parquet(
                trajectories,
                output,
                frames=lambda tid, sha: client.trajectories.frame(tid, sha).data,
                mode=frames,  # type: ignore[arg-type]
            )
    except SandboxError as e:
        fail(e)
        return
    where = f" and {result.frames} frames to {result.frames_path}" if result.frames_path else ""
    console.print(f"{result.trajectories} trajectories, {result.rows} steps to {result.steps_path}{where}")
    if result.media:
        console.print(
            f"{result.media} media (screen recordings) listed in its metadata (sandbox.media), not exported: "
            "sandbox trajectory media ID SHA256 -o FILE"
        )


@trajectory_app.command("replay")
def replay(
    trajectory_id: str,
    task: Annotated[
        Path | None, typer.Option(help="The trajectory's task file (default: found by its id in --tasks).")
    ] = None,
    tasks: Annotated[Path, typer.Option(help="Folder to find the task in by its id.")] = Path("tasks"),
    keep: Annotated[bool, typer.Option(help="Keep the replay's sandbox (print its id).")] = False,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Apply a trajectory's actions to a fresh reset of its task and print the reward it reproduces (and the
    original's). Exits 1 when they differ."""
    from sandbox.tasks.model import Task
    from sandbox.trajectories.replay import find_task
    from sandbox.trajectories.replay import replay as run_replay

    try:
        with connect(target, token) as client:
            trajectory = client.trajectories.get(trajectory_id)
            if trajectory.info.task_id is None:
                err_console.print(f"trajectory {trajectory_id} is of no task: nothing to replay")
                raise typer.Exit(1)
            loaded = Task.from_file(task) if task is not None else find_task(trajectory.info.task_id, tasks)
            result = run_replay(
                client,
                trajectory,
                loaded,
                keep=keep,
                on_step=lambda i, a: console.print(f"  step {i}: {escape(str(a.get('type')))}", highlight=False),
            )
    except SandboxError as e:
        fail(e)
        return
    for warning in result.warnings:
        err_console.print(f"[yellow]warning[/yellow]: {escape(warning)}")
    console.print(
        f"replayed {result.steps} steps of {result.trajectory_id} ({escape(result.task_id)}) in {result.seconds:.1f}s "
        f"as {result.trajectory}",
        highlight=False,
    )
    console.print(f"reward {result.reward:g} (original {_reward(result.original_reward)})", highlight=False)
    if not result.reproduced:
        raise typer.Exit(1)


@trajectory_app.command("rm")
def remove(trajectory_ids: list[str], target: TargetOpt = DEFAULT_TARGET, token: TokenOpt = None) -> None:
    """Delete trajectories (their steps and frames)."""
    try:
        with connect(target, token) as client:
            for trajectory_id in trajectory_ids:
                client.trajectories.delete(trajectory_id)
                console.print(f"deleted {trajectory_id}")
    except SandboxError as e:
        fail(e)
