"""What every ``sandbox`` command shares: the options that name the control plane (``--target``, ``--token``), the
client it makes of them, the consoles, and how it reports the platform's errors: one line on stderr, never a
traceback, exit 1.

The line is a word for what happened and the error's own message as the server (or the SDK) wrote it, hint
included; the message is printed as text (a ``[desktop]`` in it is not markup) and not wrapped:

    refused: cannot start 512 desktop sandboxes reserving ...: not enough free capacity. ... pass wait_s ...
    timed out: CreateSandbox: the control plane at 127.0.0.1:50051 did not answer within 120 s ...
    unavailable: ListSandboxes: no control plane answers at 127.0.0.1:50051 (connection refused): ...
    error (not_found): no sandbox sb-...

Exit codes, as the commands already use them: 1 for an error of the platform's, 2 for a bad command line.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from sandbox.errors import DeadlineExceeded, ResourceExhausted, SandboxError, Unavailable

if TYPE_CHECKING:
    from sandbox.client import Client

TargetOpt = Annotated[str, typer.Option("--target", envvar="SANDBOX_TARGET", help="gRPC address of the server.")]
TokenOpt = Annotated[str | None, typer.Option("--token", envvar="SANDBOX_TOKEN", help="Bearer token.")]
DEFAULT_TARGET = "127.0.0.1:50051"

console = Console()
err_console = Console(stderr=True)


def connect(target: str, token: str | None) -> Client:
    """The SDK's client of the control plane at ``target``. The SDK is imported on first use: the commands that talk
    to no control plane (``server``, ``images``, ``task check``) never load it."""
    from sandbox.client import Client

    return Client(target, token=token)


EXIT_ERROR = 1
"""The exit code of a command that failed with an error of the platform's (2 is a bad command line)."""

_WORDS: tuple[tuple[type[SandboxError], str], ...] = (
    (ResourceExhausted, "refused"),  # CapacityExhausted too: the server's reason says what was asked and what is free
    (DeadlineExceeded, "timed out"),
    (Unavailable, "unavailable"),
)


def describe(e: SandboxError) -> str:
    """The line printed for ``e``, as plain text: a word for what happened, then its message."""
    for cls, word in _WORDS:
        if isinstance(e, cls):
            return f"{word}: {e.message}"
    return f"error ({e.code}): {e.message}"


def report(e: SandboxError, console: Console | None = None) -> None:
    """Print ``e``'s line on ``console`` (stderr by default)."""
    word, _, rest = describe(e).partition(":")
    out = console if console is not None else Console(stderr=True)
    out.print(f"[red]{escape(word)}[/red]:{escape(rest)}", highlight=False, soft_wrap=True)


def fail(e: SandboxError, *, code: int = EXIT_ERROR) -> NoReturn:
    """Report ``e`` and end the command with ``code``."""
    report(e)
    raise typer.Exit(code)


def guarded(app: Callable[[], object]) -> None:
    """Run the command line ``app``: an error of the platform's that no command caught is still reported as one,
    not as a traceback."""
    try:
        app()
    except SandboxError as e:
        report(e)
        sys.exit(EXIT_ERROR)
