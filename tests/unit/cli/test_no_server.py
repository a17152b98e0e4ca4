"""With no server listening, the CLI and the SDK say where they looked and how to start one."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.client import Client
from sandbox.errors import Unavailable


def _closed_port() -> int:
    """A port nobody listens on (bound, then released: refused right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_names_the_address_and_how_to_start_a_server() -> None:
    target = f"127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["ls", "--target", target])
    assert result.exit_code == 1
    said = " ".join(result.output.split())  # rich wraps long lines
    assert f"no control plane answers at {target} (connection refused)" in said, said
    assert "`sandbox server`" in said and "SANDBOX_TARGET" in said, said


def test_sdk_error_names_the_address() -> None:
    target = f"127.0.0.1:{_closed_port()}"
    with (
        Client(target, timeout=10) as client,
        pytest.raises(Unavailable, match=f"no control plane answers at {target}"),
    ):
        client.list()
