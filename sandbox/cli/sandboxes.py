"""The `sandbox` command: run the control plane, build images, and drive sandboxes through the SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sandbox.cli.capacity import capacity, waiting_table
from sandbox.cli.common import fail as _fail
from sandbox.cli.demo import demo_app
from sandbox.cli.tasks import task_app
from sandbox.cli.trajectories import trajectory_app
from sandbox.errors import SandboxError
from sandbox.models import GROUP_MAX
from sandbox.observability.logs import LogFormat

if TYPE_CHECKING:
    from sandbox.client import Client

app = typer.Typer(help="Sandboxes for GUI-agent RL rollouts.", no_args_is_help=True, add_completion=False)
images_app = typer.Typer(help="Build the platform's images from Debian packages (no registry needed) and push them.")
app.add_typer(images_app, name="images")
app.add_typer(task_app, name="task")
app.add_typer(trajectory_app, name="trajectory")
app.add_typer(demo_app, name="demo")
app.command("capacity")(capacity)
console = Console()
err_console = Console(stderr=True)

TargetOpt = Annotated[str, typer.Option("--target", envvar="SANDBOX_TARGET", help="gRPC address of the server.")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="SANDBOX_TOKEN", help="Bearer token.")]
DEFAULT_TARGET = "127.0.0.1:50051"


def _client(target: str, token: str | None) -> Client:
    from sandbox.client import Client

    return Client(target, token=token)


@app.command()
def server(
    host: Annotated[str | None, typer.Option(help="Bind address (loopback unless tokens are set).")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port [default: 50051].")] = None,
    http_port: Annotated[int | None, typer.Option(help="HTTP (REST, docs) port [default: 8080].")] = None,
    public_url: Annotated[
        str | None,
        typer.Option(
            envvar="SANDBOX_PUBLIC_URL",
            help="HTTP address callers reach this server at (e.g. behind a proxy), for preview URLs "
            "[default: http://<host>:<http-port>].",
        ),
    ] = None,
    tokens_file: Annotated[
        str | None, typer.Option(envvar="SANDBOX_TOKENS_FILE", help="JSON {token: tenant | {tenant, admin}}.")
    ] = None,
    owner: Annotated[
        str | None, typer.Option(help="Label value marking this control plane's instances [default: default].")
    ] = None,
    socket_root: Annotated[
        str | None,
        typer.Option(help="Docker backend: host directory for the agents' sockets [default: /run/sandbox-platform]."),
    ] = None,
    state: Annotated[str | None, typer.Option(help="State file of the embedded store.")] = None,
    redis_url: Annotated[
        str | None, typer.Option(envvar="SANDBOX_REDIS_URL", help="Share state with other replicas in Redis.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="JSON file of server settings (pools, lifecycle, store); flags win.")
    ] = None,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            envvar="SANDBOX_LOG_FORMAT",
            help="Log lines on stderr: 'json' (one object a line: ts, level, logger, message, sandbox_id, tenant, "
            "...), 'text', or 'auto': text on a terminal, JSON otherwise (a file, a pipe, systemd, a container).",
        ),
    ] = LogFormat.AUTO,
    log_level: Annotated[str, typer.Option(envvar="SANDBOX_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR.")] = "INFO",
) -> None:
    """Run the control plane: a backend (Docker unless the config file names another), the state store, gRPC and
    HTTP in one process. Prometheus metrics are at http://<host>:<http-port>/metrics."""
    from pydantic import ValidationError

    from sandbox.observability.logs import configure_logging

    try:
        from sandbox.server import ServerSettings, serve
    except ModuleNotFoundError as e:  # a client-only install
        what = f"the control plane needs {e.name}: pip install 'sandbox\\[server]'"
        err_console.print(f"[red]error[/red]: {what}", soft_wrap=True)
        raise typer.Exit(2) from None

    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        err_console.print(f"[red]error[/red]: --log-level must be DEBUG, INFO, WARNING or ERROR, not {log_level!r}")
        raise typer.Exit(2)
    configure_logging(log_format, level=level)
    try:
        raw: dict[str, Any] = json.loads(config.read_text()) if config else {}
        flags = {
            "host": host,
            "grpc_port": grpc_port,
            "http_port": http_port,
            "public_url": public_url,
            "tokens_file": tokens_file,
        }
        raw.update({name: value for name, value in flags.items() if value is not None})
        raw["backend"] = _backend_settings(raw.get("backend"), owner=owner, socket_root=socket_root)
        if redis_url:
            namespace = f"sandbox-{raw['backend'].get('owner', 'default')}"
            raw["store"] = {"type": "redis", "url": redis_url, "namespace": namespace}
        elif state:
            raw["store"] = {"type": "embedded", "path": state}
        settings = ServerSettings.model_validate(raw)
    except (OSError, ValueError, ValidationError) as e:
        err_console.print(f"[red]error[/red]: bad server settings: {e}")
        raise typer.Exit(2) from None
    try:
        asyncio.run(serve(settings, logger=logging.getLogger("sandbox.server")))
    except SandboxError as e:
        _fail(e)


def _backend_settings(config: Any, *, owner: str | None, socket_root: str | None) -> dict[str, Any]:
    """The config file's backend (Docker when it names none), with the flags given on the command line on top."""
    backend: dict[str, Any] = dict(config) if isinstance(config, dict) else {"type": "docker"}
    backend.setdefault("type", "docker")
    if owner is not None:
        backend["owner"] = owner
    if socket_root is not None:
        if backend["type"] != "docker":
            raise ValueError(f"--socket-root applies to the docker backend, not {backend['type']!r}")
        backend["socket_root"] = socket_root
    return backend


KindsArg = Annotated[
    list[str] | None,
    typer.Argument(help="terminal, desktop, browser, terminal-jupyter, controlplane (default: all but controlplane)."),
]
PushKindsArg = Annotated[
    list[str] | None, typer.Argument(help="terminal, desktop, browser, terminal-jupyter, controlplane (default: all).")
]
RecipesDirOpt = Annotated[
    Path | None, typer.Option(help="Directory of the image recipes (default: the checkout's images/).")
]


def _image_kinds(kinds: list[str] | None) -> list[str]:
    from sandbox.backends.docker.images import SANDBOX_IMAGES

    return kinds or list(SANDBOX_IMAGES)


def _progress(line: str) -> None:
    # Build output is not markup: '[desktop] ...' and mmdebstrap's brackets must print as they are.
    console.print(line, markup=False, highlight=False, soft_wrap=True)


@images_app.command("build")
def images_build(
    kinds: KindsArg = None,
    force: Annotated[bool, typer.Option(help="Rebuild even when the recipe is unchanged.")] = False,
    recipes_dir: RecipesDirOpt = None,
) -> None:
    """Build images (controlplane only when named); unchanged recipes are skipped in seconds."""
    from sandbox.backends.docker.images import build_images

    started = time.monotonic()
    try:
        built = build_images(_image_kinds(kinds), force=force, recipes_dir=recipes_dir, progress=_progress)
    except SandboxError as e:
        _fail(e)
    for kind, tag in built.items():
        console.print(f"{kind}: [green]{tag}[/green] (also {tag.rsplit(':', 1)[0]}:latest)")
    console.print(f"images ready in {time.monotonic() - started:.1f}s")


@images_app.command("check")
def images_check(kinds: KindsArg = None, recipes_dir: RecipesDirOpt = None) -> None:
    """Build nothing: exit 0 when every image is built from its current recipe, 1 (naming the stale ones) if not."""
    from sandbox.backends.docker.images import outdated

    wanted = _image_kinds(kinds)
    try:
        stale = outdated(wanted, recipes_dir=recipes_dir)
    except SandboxError as e:
        _fail(e)
    for kind in wanted:
        if kind in stale:
            console.print(f"{kind}: [yellow]out of date[/yellow] (run `sandbox images build {kind}`)")
        else:
            console.print(f"{kind}: up to date")
    if stale:
        raise typer.Exit(1)


@images_app.command("prune")
def images_prune(kinds: KindsArg = None, recipes_dir: RecipesDirOpt = None) -> None:
    """Remove superseded images of this platform that no container uses; the current recipe's images stay."""
    from sandbox.backends.docker.images import prune

    try:
        removed = prune(_image_kinds(kinds), recipes_dir=recipes_dir, progress=_progress)
    except SandboxError as e:
        _fail(e)
    console.print(f"removed {len(removed)} image reference{'' if len(removed) == 1 else 's'}")


@images_app.command("push")
def images_push(
    registry: Annotated[str, typer.Argument(help="host[:port][/path] of the registry, e.g. 127.0.0.1:5000.")],
    kinds: PushKindsArg = None,
    build: Annotated[
        bool, typer.Option(help="Build what is missing or out of date first (--no-build: fail on it instead).")
    ] = True,
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Push under this tag too, e.g. the chart's appVersion.")
    ] = None,
    recipes_dir: RecipesDirOpt = None,
) -> None:
    """Tag images as REGISTRY/sandbox/<kind>:<hash> and :latest and push them; exit 1 on the first failure."""
    from sandbox.backends.docker.images import IMAGE_KINDS, push_images

    started = time.monotonic()
    try:
        pushed = push_images(
            registry,
            kinds or list(IMAGE_KINDS),
            build=build,
            extra_tags=tag or [],
            recipes_dir=recipes_dir,
            progress=_progress,
        )
    except SandboxError as e:
        _fail(e)
    for ref, digest in pushed.items():
        console.print(f"[green]{ref}[/green] {digest}", highlight=False, soft_wrap=True)
    console.print(f"pushed {len(pushed)} references in {time.monotonic() - started:.1f}s")


@app.command()
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
        with _client(target, token) as client:
            group = count > 1
            made = (
                client.create_group(count, kind, wait_s=wait, **spec)
                if group
                else [client.create(kind, wait_s=wait, **spec)]
            )
            for sandbox in made:
                console.print(sandbox.id)
    except SandboxError as e:
        _fail(e)


@app.command("ls")
def list_sandboxes(target: TargetOpt = DEFAULT_TARGET, token: TokenOpt = None) -> None:
    """List your sandboxes."""
    try:
        with _client(target, token) as client:
            infos, waiting = client.list(), client.waiting()
    except SandboxError as e:
        _fail(e)
    table = Table("id", "kind", "state", "age", "tenant", "error")
    now = time.time()
    for info in infos:
        age = f"{now - info.created_at:.0f}s"
        table.add_row(info.id, info.kind.value, info.state.value, age, info.tenant, info.error or "")
    console.print(table)
    if waiting:
        console.print(waiting_table(waiting))


@app.command("exec")
def exec_command(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    cmd: Annotated[list[str], typer.Argument(help="Command and arguments (use -- before them).")],
    timeout: Annotated[float, typer.Option(help="Seconds before the command is killed.")] = 60.0,
    session: Annotated[str | None, typer.Option(help="Persistent shell session to run in.")] = None,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Run a command in a sandbox; prints its output and exits with its exit code."""
    command: str | list[str] = " ".join(cmd) if session or len(cmd) == 1 else cmd
    try:
        with _client(target, token) as client:
            result = client.get(sandbox_id).exec(command, timeout=timeout, session=session)
    except SandboxError as e:
        _fail(e)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.timed_out:
        err_console.print(f"[yellow]timed out after {timeout:g} s[/yellow]")
    raise typer.Exit(result.exit_code if result.exit_code is not None else 124)


@app.command()
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
        with _client(target, token) as client:
            obs = client.get(sandbox_id).step(parsed)
    except SandboxError as e:
        _fail(e)
    console.print_json(obs.model_dump_json(exclude={"screenshot"}))


@app.command()
def shot(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write.")] = Path("screenshot.png"),
    format: Annotated[str, typer.Option(help="png or jpeg.")] = "png",
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Save a screenshot of a sandbox's display."""
    try:
        with _client(target, token) as client:
            obs = client.get(sandbox_id).observe(format=format)
    except SandboxError as e:
        _fail(e)
    if obs.screenshot is None:
        err_console.print("[red]error[/red]: this sandbox has no display")
        raise typer.Exit(1)
    output.write_bytes(obs.screenshot.data)
    console.print(f"{output} ({obs.screenshot.width}x{obs.screenshot.height} {obs.screenshot.format})")


@app.command()
def reset(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Reset a sandbox to its initial state (fresh /workspace)."""
    try:
        with _client(target, token) as client:
            client.get(sandbox_id).reset()
    except SandboxError as e:
        _fail(e)
    console.print(f"reset {sandbox_id}")


@app.command("rm")
def remove(
    sandbox_ids: Annotated[list[str], typer.Argument(help="Sandbox ids.")],
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Delete sandboxes."""
    try:
        with _client(target, token) as client:
            for sandbox_id in sandbox_ids:
                client.get(sandbox_id).close()
                console.print(f"deleted {sandbox_id}")
    except SandboxError as e:
        _fail(e)


@app.command()
def logs(
    sandbox_id: Annotated[str, typer.Argument(help="Sandbox id.")],
    tail: Annotated[int, typer.Option(help="Lines from the end.")] = 200,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Print a sandbox's own logs (its services and agent)."""
    try:
        with _client(target, token) as client:
            sys.stdout.write(client.get(sandbox_id).logs(tail=tail))
    except SandboxError as e:
        _fail(e)


@app.command("url")
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
        with _client(target, token) as client:
            url = client.get(sandbox_id).url(port, ttl=ttl, full_path=full_path)
    except SandboxError as e:
        _fail(e)
    sys.stdout.write(url + "\n")  # not rich: a long URL must not wrap
