"""Errors under load say what happened: a real ``grpc.aio`` server on 127.0.0.1 over the fake backend's service
(tests/unit/conftest.py), whose methods are patched to hang, refuse or fail, driven through both SDK clients and the
CLI. The blocking client and the CLI run in a worker thread so that the server, in the test's event loop, answers.

- the client's own deadline passing is ``DeadlineExceeded`` naming the call, the timeout, and what to check;
- a server's own message (a refusal for capacity, its own deadline, its own "Connection refused") arrives intact;
- no server at all is ``Unavailable`` naming the address and how to start one;
- the CLI prints a word and the message on stderr, exit 1, never a traceback.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner, Result

from sandbox import cli
from sandbox.cli import app, sandboxes
from sandbox.client import AsyncClient, Client
from sandbox.client._errors import translate
from sandbox.errors import CapacityExhausted, DeadlineExceeded, ResourceExhausted, SandboxError, Unavailable
from sandbox.service import SandboxService
from tests.unit.conftest import ALPHA_TOKEN

TIMEOUT = 0.3
"""The client's deadline in these tests: short, since the server is made never to answer in time."""

REFUSAL = (
    "cannot start 512 desktop sandboxes reserving 2,048 MiB and 1 CPU each: not enough free capacity "
    "(memory: 1,024 MiB free of 65,536 MiB) [desktop]. 0 fit now; delete sandboxes you no longer need, ask for fewer, "
    "or pass wait_s to queue for capacity (retry after 5 s)"
)
"""A refusal as the capacity admission writes it (with a bracket that must not be taken for markup)."""


def _closed_port() -> int:
    """A port nobody listens on (bound, then released: refused right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Hang:
    """A service method that never answers: it says it was called, then waits until the test ends."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.entered.set()
        await self.release.wait()
        raise AssertionError("released only when the test is over")


@pytest.fixture
async def hang(service: SandboxService, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Hang]:
    """``get`` and ``list_sandboxes`` of the module's service hang. (Not ``create``: its deadline is at least the
    SDK's least one for a create, whatever the client's timeout.)"""
    hung = Hang()
    monkeypatch.setattr(service, "get", hung)
    monkeypatch.setattr(service, "list_sandboxes", hung)
    yield hung
    hung.release.set()


def _refuse_with(service: SandboxService, monkeypatch: pytest.MonkeyPatch, error: SandboxError) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise error

    for method in ("create", "create_group", "list_sandboxes"):
        monkeypatch.setattr(service, method, refuse)


def _assert_client_deadline(e: DeadlineExceeded, target: str, method: str) -> None:
    said = e.message
    assert said.startswith(f"{method}: the control plane at {target} did not answer within {TIMEOUT:g} s"), said
    assert "overloaded or waiting on its engine" in said and "`GET /readyz`" in said, said
    assert "larger timeout=" in said, said
    assert "wait_s=" not in said, said  # queueing for capacity: a create's hint only


# --------------------------------------------------------------------------- the client's deadline


async def test_async_client_deadline_names_the_call_the_timeout_and_the_hint(target: str, hang: Hang) -> None:
    async with AsyncClient(target, token=ALPHA_TOKEN, timeout=TIMEOUT) as client:
        with pytest.raises(DeadlineExceeded) as caught:
            await client.get("sb-1")
    assert hang.entered.is_set(), "the call reached the server, which did not answer in time"
    _assert_client_deadline(caught.value, target, "GetSandbox")


async def test_sync_client_deadline_names_the_call_the_timeout_and_the_hint(target: str, hang: Hang) -> None:
    def call() -> None:
        with Client(target, token=ALPHA_TOKEN, timeout=TIMEOUT) as client:
            client.list()

    with pytest.raises(DeadlineExceeded) as caught:
        await asyncio.to_thread(call)
    assert hang.entered.is_set()
    _assert_client_deadline(caught.value, target, "ListSandboxes")


# --------------------------------------------------------------------------- the server's own messages


async def test_a_refusal_for_capacity_arrives_intact(
    target: str, service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_with(service, monkeypatch, CapacityExhausted(REFUSAL))
    async with AsyncClient(target, token=ALPHA_TOKEN, timeout=10) as client:
        with pytest.raises(ResourceExhausted) as caught:
            await client.create("desktop")
    assert caught.value.message == REFUSAL
    assert type(caught.value) is CapacityExhausted, "the trailer's error code names the subclass"

    def group() -> None:
        with Client(target, token=ALPHA_TOKEN, timeout=10) as client:
            client.create_group(512, "desktop")

    with pytest.raises(ResourceExhausted) as caught:
        await asyncio.to_thread(group)
    assert caught.value.message == REFUSAL
    assert type(caught.value) is CapacityExhausted


@pytest.mark.parametrize(
    "error",
    [
        DeadlineExceeded("sandbox sb-1 is busy (reset or recovery in progress)"),
        Unavailable("the agent of sandbox sb-1 does not answer at /run/x.sock: ConnectionRefusedError(111, "
                    "'Connection refused')"),
    ],
    ids=["deadline", "unavailable"],
)  # fmt: skip
async def test_the_server_s_own_deadline_and_unavailable_are_not_rewritten(
    target: str, service: SandboxService, monkeypatch: pytest.MonkeyPatch, error: SandboxError
) -> None:
    _refuse_with(service, monkeypatch, error)
    async with AsyncClient(target, token=ALPHA_TOKEN, timeout=10) as client:
        with pytest.raises(type(error)) as caught:
            await client.list()
    assert caught.value.message == error.message


# --------------------------------------------------------------------------- no server


async def test_no_server_is_unavailable_naming_the_address() -> None:
    target = f"127.0.0.1:{_closed_port()}"

    def check(e: Unavailable) -> None:
        said = e.message
        assert said.startswith(f"ListSandboxes: no control plane answers at {target} (connection refused)"), said
        assert "not running, or not reachable" in said and "`make run`" in said, said

    async with AsyncClient(target, timeout=10) as client:
        with pytest.raises(Unavailable) as caught:
            await client.list()
    check(caught.value)

    def call() -> None:
        with Client(target, timeout=10) as client:
            client.list()

    with pytest.raises(Unavailable) as caught:
        await asyncio.to_thread(call)
    check(caught.value)


@pytest.mark.parametrize(
    ("code", "details", "starts"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded",
         "Step: the control plane at h:1 did not answer within 2 s"),
        (grpc.StatusCode.UNAVAILABLE, "errors resolving nope.invalid:1: Domain name not found",
         "Step: no control plane answers at h:1 (cannot resolve the host name)"),
        (grpc.StatusCode.UNAVAILABLE, "Socket closed", "Step: the connection to the control plane at h:1 broke"),
        (grpc.StatusCode.UNAVAILABLE, "recvmsg:Connection reset by peer", "Step: the connection to the control"),
        (grpc.StatusCode.UNAVAILABLE, "the agent does not answer: Connection refused", "the agent does not answer"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, REFUSAL, REFUSAL),
    ],
)  # fmt: skip
def test_translate(code: grpc.StatusCode, details: str, starts: str) -> None:
    error = translate(code, details, target="h:1", method="Step", timeout=2)
    assert error.message.startswith(starts), error.message


@pytest.mark.parametrize("method", ["CreateSandbox", "CreateSandboxes"])
def test_a_create_s_deadline_also_suggests_queueing_for_capacity(method: str) -> None:
    error = translate(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", target="h:1", method=method, timeout=125)
    assert isinstance(error, DeadlineExceeded)
    assert error.message.startswith(f"{method}: the control plane at h:1 did not answer within 125 s"), error.message
    assert "`GET /readyz`" in error.message and "pass wait_s= to queue for capacity" in error.message, error.message


def test_a_bare_deadline_with_no_timeout_of_the_client_s_is_left_as_sent() -> None:
    error = translate(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", target="h:1", method="X", timeout=None)
    assert type(error) is DeadlineExceeded and error.message == "Deadline Exceeded"


# --------------------------------------------------------------------------- the CLI


async def _invoke(args: list[str]) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, app, args)


def _no_traceback(result: Result) -> None:
    assert "Traceback" not in result.output, result.output
    assert isinstance(result.exception, SystemExit), result.exception


async def test_cli_prints_a_refusal_s_reason_without_a_traceback(
    target: str, service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_with(service, monkeypatch, CapacityExhausted(REFUSAL))
    for args in (["create", "desktop"], ["create", "desktop", "--count", "512"]):
        result = await _invoke([*args, "--target", target, "--token", ALPHA_TOKEN])
        assert result.exit_code == 1, result.output
        assert result.stderr.strip() == f"refused: {REFUSAL}", result.stderr
        assert result.stdout == ""
        _no_traceback(result)


async def test_cli_says_a_call_timed_out_and_what_to_check(
    target: str, hang: Hang, monkeypatch: pytest.MonkeyPatch
) -> None:
    def short(target: str, token: str | None) -> Client:  # no command-line option sets the timeout
        return Client(target, token=token, timeout=TIMEOUT)

    monkeypatch.setattr(sandboxes, "connect", short)
    result = await _invoke(["ls", "--target", target, "--token", ALPHA_TOKEN])
    assert result.exit_code == 1, result.output
    said = result.stderr.strip()
    assert said.startswith(f"timed out: ListSandboxes: the control plane at {target} did not answer within 0.3 s"), said
    assert "`GET /readyz`" in said, said
    _no_traceback(result)


async def test_cli_with_no_server_says_so() -> None:
    target = f"127.0.0.1:{_closed_port()}"
    result = await _invoke(["rm", "sb-1", "--target", target])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"unavailable: GetSandbox: no control plane answers at {target}"), result.stderr
    _no_traceback(result)


def test_cli_main_reports_an_error_no_command_caught(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def escaped() -> None:
        raise CapacityExhausted(REFUSAL)

    monkeypatch.setattr(cli, "app", escaped)
    monkeypatch.setattr(sys, "argv", ["sandbox", "create", "desktop"])
    with pytest.raises(SystemExit) as caught:
        cli.main()
    assert caught.value.code == 1
    assert capsys.readouterr().err.strip() == f"refused: {REFUSAL}"
