"""``sandbox.wire``: the one status table, the SDK's independence from the server, the deadline rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from sandbox import errors
from sandbox.protocol import ErrorCode
from sandbox.wire import limits, status

ROOT = Path(__file__).resolve().parents[3]


def every_error_class() -> list[type[errors.SandboxError]]:
    """``SandboxError`` and every subclass of ``sandbox.errors``. A subclass defined elsewhere (a task's
    ``TaskError``, a test's) takes its nearest ancestor's row, as ``sandbox.wire.status`` says."""
    found: list[type[errors.SandboxError]] = []
    pending: list[type[errors.SandboxError]] = [errors.SandboxError]
    while pending:
        cls = pending.pop()
        if cls.__module__ == errors.__name__:
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def agent_codes() -> set[str]:
    return {value for name, value in vars(ErrorCode).items() if name.isupper()}


# --------------------------------------------------------------------------- the status table


def test_every_error_class_has_exactly_one_row() -> None:
    rows = [row.error for row in status.TABLE]
    assert len(rows) == len(set(rows)), "a class has two rows"
    missing = [cls.__name__ for cls in every_error_class() if cls not in rows]
    assert not missing, f"no row in sandbox.wire.status.TABLE for {missing}"


def test_every_agent_code_is_in_exactly_one_row() -> None:
    codes = [row.agent_code for row in status.TABLE if row.agent_code is not None]
    assert len(codes) == len(set(codes))
    assert set(codes) == agent_codes()


@pytest.mark.parametrize("row", status.TABLE, ids=lambda row: row.error.__name__)
def test_each_mapping_reads_the_row(row: status.Row) -> None:
    error = row.error("boom")
    assert status.grpc_status(error) is row.grpc_status
    assert status.http_status(error) == row.http_status
    assert status.grpc_status_of_http(row.http_status) is not None
    if row.agent_code is not None:
        back = status.from_agent(row.agent_code, "boom")
        assert type(back) is row.error and back.message == "boom"


@pytest.mark.parametrize("row", status.TABLE, ids=lambda row: row.error.__name__)
def test_exception_grpc_exception_round_trip(row: status.Row) -> None:
    """A class that owns its gRPC status (the first row with it) comes back as itself; one that shares
    INTERNAL comes back as InternalError; one that shares its parent's status (CapacityExhausted) as the parent,
    which an ``except`` of either catches."""
    owner = next(r.error for r in status.TABLE if r.grpc_status is row.grpc_status)
    back = status.from_grpc(status.grpc_status(row.error("boom")), "boom")
    assert type(back) is owner and back.message == "boom"
    if row.grpc_status is grpc.StatusCode.INTERNAL:
        assert owner is errors.InternalError
    else:
        assert issubclass(row.error, owner), f"{row.error.__name__} comes back as {owner.__name__}, not a parent"
        assert owner is row.error or row.error is errors.CapacityExhausted


def test_a_subclass_without_a_row_takes_its_ancestors() -> None:
    class Gone(errors.NotFound):
        pass

    assert status.grpc_status(Gone("x")) is grpc.StatusCode.NOT_FOUND
    assert status.http_status(Gone("x")) == 404


def test_unknown_statuses_and_codes() -> None:
    assert type(status.from_grpc(grpc.StatusCode.CANCELLED, "x")) is errors.InternalError
    assert type(status.from_agent("no_such_code", "x")) is errors.InternalError
    assert status.grpc_status_of_http(418) is None
    assert status.error_code_of_http(418) == status.UNKNOWN_HTTP_CODE
    assert status.grpc_status_of_number(grpc.StatusCode.NOT_FOUND.value[0]) is grpc.StatusCode.NOT_FOUND
    assert status.grpc_status_of_number(12345) is grpc.StatusCode.UNKNOWN


def test_framework_statuses() -> None:
    """What the REST skin answers on its own: named in both vocabularies."""
    assert status.grpc_status_of_http(400) is grpc.StatusCode.INVALID_ARGUMENT
    assert status.grpc_status_of_http(405) is grpc.StatusCode.UNIMPLEMENTED
    assert status.grpc_status_of_http(422) is grpc.StatusCode.INVALID_ARGUMENT
    assert status.grpc_status_of_http(404) is grpc.StatusCode.NOT_FOUND
    assert status.grpc_status_of_http(413) is grpc.StatusCode.RESOURCE_EXHAUSTED
    codes = {s: status.error_code_of_http(s) for s in (400, 404, 405, 413, 422)}
    assert codes == {
        400: "invalid_argument",
        404: "not_found",
        405: "method_not_allowed",
        413: "resource_exhausted",
        422: "invalid_argument",
    }
    table_statuses = {row.http_status for row in status.TABLE}
    assert not table_statuses & {s.http_status for s in status.FRAMEWORK_STATUSES}


# --------------------------------------------------------------------------- the SDK imports no server


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_sdk_imports_nothing_of_the_server() -> None:
    code = (
        "import sandbox.client, sandbox.gym, sys; "
        "bad = [m for m in sys.modules if m.startswith(('sandbox.api', 'sandbox.service', 'sandbox.backends', "
        "'sandbox.store', 'fastapi', 'uvicorn', 'starlette', 'docker', 'redis'))]; "
        "assert not bad, bad"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_errors_import_without_grpc() -> None:
    result = run_python("import sandbox.errors, sys; assert 'grpc' not in sys.modules, 'grpc imported'")
    assert result.returncode == 0, result.stderr


def test_limits_import_without_grpc() -> None:
    """The control plane's agent client takes the deadline rule from here: stdlib only."""
    result = run_python(
        "import sandbox.wire.limits, sys; bad = [m for m in ('grpc', 'google') if m in sys.modules]; "
        "assert not bad, bad"
    )
    assert result.returncode == 0, result.stderr


# --------------------------------------------------------------------------- the deadline rule


@pytest.mark.parametrize("op_timeout", [0.0, 0.5, 60.0, 3600.0])
def test_deadlines_nest(op_timeout: float) -> None:
    """agent op timeout < agent transport deadline < client RPC deadline."""
    assert op_timeout < limits.agent_deadline(op_timeout) < limits.call_deadline(op_timeout)


def test_the_client_uses_the_rule() -> None:
    from sandbox.client import _ops
    from sandbox.models import Exec, Wait

    assert _ops._action_budget(Exec(cmd="true", timeout=10)) == limits.call_deadline(10)
    assert _ops._action_budget(Wait(seconds=3)) == limits.call_deadline(3)


def test_file_chunks_fit_in_a_message() -> None:
    from sandbox.client import _ops

    assert _ops.CHUNK_BYTES * 2 <= limits.MAX_MESSAGE_BYTES
    assert dict(_ops.CHANNEL_OPTIONS) == dict(limits.MESSAGE_SIZE_OPTIONS)
