"""The commands on sandboxes: ``create``, ``ls``, ``exec``, ``step``, ``shot``, ``reset``, ``rm``, ``logs`` and
``url``, each one call (or a few) of the SDK against the control plane that ``--target`` names."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from sandbox.cli.capacity import waiting_table
from sandbox.cli.common import DEFAULT_TARGET, TargetOpt, TokenOpt, connect, console, err_console, fail
from sandbox.errors import SandboxError
from sandbox.models import GROUP_MAX


def create(
    kind: Annotated[str, typer.Argument(help="terminal, desktop or browser.")],
    image: Annotated[str | None, typer.Option(help="Image instead of the kind's default.")] = None,
    cpus: Annotated[float | None, typer.Option(help="CPU cores.")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory limit in MiB.")] = None,
    screen: Annotated[str | None, typer.Option(help="WIDTHxHEIGHT, e.g. 1280x800.")] = None,
    count: Annotated[
        int, typer.Option(min=1, max=GROUP_MAX, help="A rollout group of this many, made in one call: all or none.")
    ] = 1,
    wait: Annotated[float, typer.Option(min=0, help="Seconds to queue for capacity if the host is full.")] = 0,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Create a sandbox (or --count of them) and print its id (one a line)."""
    spec: dict[str, Any] = {}
    if image:
        spec["image"] = image
    resources = {k: v for k, v in {"cpus": cpus, "memory_mb": memory_mb}.items() if v is not None}
    if resources:
        spec["resources"] = resources
    if screen:
        try:
            width, height = (int(v) for v in screen.lower().split("x"))
        except ValueError:
            err_console.print(f"[red]error[/red]: --screen must look like 1280x800, not {screen!r}")
            raise typer.Exit(2) from None
        spec["screen"] = {"width": width, "height": height}
    try:
        with connect(target, token) as client:
            group = count > 1
            made = (
                client.create_group(count, kind, wait_s=wait, **spec)
                if group
                else [client.create(kind, wait_s=wait, **spec)]
            )
            for sandbox in made:
                console.print(sandbox.id)
    except SandboxError as e:
        fail(e)


def list_sandboxes(target: TargetOpt = DEFAULT_TARGET, token: TokenOpt = None) -> None:
    """List your sandboxes."""
    try:
        with connect(target, token) as client:
            infos, waiting = client.list(), client.waiting()
    except SandboxError as e:
        fail(e)
    table = Table("id", "kind", "state", "age", "tenant", "error")
    now = time.time()
    for info in infos:
        age = f"{now - info.created_at:.0f}s"
        table.add_row(info.id, info.kind.value, info.state.value, age, info.tenant, info.error or "")
    console.print(table)
    if waiting:
        console.print(waiting_table(waiting))


def exec_command(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    cmd: Annotated[list[str], typer.Argument(help="Command and arguments (use -- before them).")],
    timeout: Annotated[float, typer.Option(help="Seconds before the command is killed.")] = 60.0,
    session: Annotated[str | None, typer.Option(help="Persistent shell session to run in.")] = None,
    background: Annotated[
        bool, typer.Option("--background", help="Start it and return: it outlives the call (prints its pid).")
    ] = False,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Run a command in a sandbox; prints its output and exits with its exit code (with --background: starts a
    program that keeps running, e.g. a GUI app on a desktop, and prints its process id)."""
    command: str | list[str] = " ".join(cmd) if session or len(cmd) == 1 else cmd
    if background:
        line = command if isinstance(command, str) else shlex.join(command)
        command = f"({line}) </dev/null >/dev/null 2>&1 & echo $!"
    try:
        with connect(target, token) as client:
            result = client.get(sandbox_id).exec(command, timeout=timeout, session=session, keep_background=background)
    except SandboxError as e:
        fail(e)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.timed_out:
        err_console.print(f"[yellow]timed out after {timeout:g} s[/yellow]")
    raise typer.Exit(result.exit_code if result.exit_code is not None else 124)


def step(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    action: Annotated[str, typer.Argument(help='One action as JSON, e.g. \'{"type": "click", "x": 10, "y": 20}\'.')],
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Send one action and print the observation (without screenshot bytes) as JSON."""
    try:
        parsed = json.loads(action)
    except ValueError as e:
        err_console.print(f"[red]error[/red]: the action is not JSON: {e}")
        raise typer.Exit(2) from None
    try:
        with connect(target, token) as client:
            obs = client.get(sandbox_id).step(parsed)
    except SandboxError as e:
        fail(e)
    console.print_json(obs.model_dump_json(exclude={"screenshot"}))


def shot(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write.")] = Path("screenshot.png"),
    format: Annotated[str, typer.Option(help="png or jpeg.")] = "png",
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Save a screenshot of a sandbox's display."""
    try:
        with connect(target, token) as client:
            obs = client.get(sandbox_id).observe(format=format)
    except SandboxError as e:
        fail(e)
    if obs.screenshot is None:
        err_console.print("[red]error[/red]: this sandbox has no display")
        raise typer.Exit(1)
    output.write_bytes(obs.screenshot.data)
    console.print(f"{output} ({obs.screenshot.width}x{obs.screenshot.height} {obs.screenshot.format})")


def reset(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Reset a sandbox to its initial state (fresh /workspace)."""
    try:
        with connect(target, token) as client:
            client.get(sandbox_id).reset()
    except SandboxError as e:
        fail(e)
    console.print(f"reset {sandbox_id}")


def remove(
    sandbox_ids: Annotated[list[str], typer.Argument(help="Sandbox ids.")],
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Delete sandboxes."""
    try:
        with connect(target, token) as client:
            for sandbox_id in sandbox_ids:
                client.get(sandbox_id).close()
                console.print(f"deleted {sandbox_id}")
    except SandboxError as e:
        fail(e)


def logs(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    tail: Annotated[int, typer.Option(help="Lines from the end.")] = 200,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Print a sandbox's own logs (its services and agent)."""
    try:
        with connect(target, token) as client:
            sys.stdout.write(client.get(sandbox_id).logs(tail=tail))
    except SandboxError as e:
        fail(e)


def preview_url(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    port: Annotated[int, typer.Argument(help="A port the sandbox listens on, 1024-65535.")],
    ttl: Annotated[float | None, typer.Option(help="Seconds the URL's ticket lasts [default: 300].")] = None,
    full_path: Annotated[
        bool, typer.Option("--full-path", help="The /apps/PORT/ form: the app gets the whole path.")
    ] = False,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Print a preview URL: HTTP and websockets to PORT inside the sandbox, through the control plane."""
    from sandbox.models.preview import UrlRequest
    from sandbox.wire.convert import validate

    try:
        validate(UrlRequest, {"port": port, "ttl_s": ttl}, what="preview URL request")
    except SandboxError as e:
        err_console.print(f"[red]error[/red]: {e.message.replace('ttl_s:', '--ttl:')}", soft_wrap=True)
        raise typer.Exit(2) from None
    try:
        with connect(target, token) as client:
            url = client.get(sandbox_id).url(port, ttl=ttl, full_path=full_path)
    except SandboxError as e:
        fail(e)
    sys.stdout.write(url + "\n")  # not rich: a long URL must not wrap
