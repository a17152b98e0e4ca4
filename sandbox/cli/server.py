"""``sandbox server``: run the control plane (a backend, the state store, gRPC and HTTP) in this process. The server
is imported when the command runs: a client-only install has the other commands, and this one says what it lacks."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from sandbox.cli.common import err_console, fail
from sandbox.errors import SandboxError
from sandbox.observability.logs import LogFormat


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
        fail(e)


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
