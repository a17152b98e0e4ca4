"""The sync and async SDKs have the same public surface: the same methods, each with the same
parameters (names, kinds, defaults, annotations); the async ones are coroutines (or async
context managers), the sync ones are not."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from sandbox.client import (
    AsyncClient,
    AsyncFiles,
    AsyncSandbox,
    AsyncStepStream,
    Client,
    Files,
    Sandbox,
    StepStream,
)

PAIRS = [(Client, AsyncClient), (Sandbox, AsyncSandbox), (Files, AsyncFiles), (StepStream, AsyncStepStream)]
# Methods that hand back an object rather than doing I/O: plain functions in both.
NOT_COROUTINES = {"step_stream"}
SYNC_NAMES = {
    "Client": "AsyncClient",
    "Sandbox": "AsyncSandbox",
    "Files": "AsyncFiles",
    "StepStream": "AsyncStepStream",
}


def public(cls: type) -> dict[str, Any]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


def params(fn: Any) -> list[tuple[str, Any, Any, str]]:
    return [(p.name, p.kind, p.default, str(p.annotation)) for p in inspect.signature(fn).parameters.values()]


def async_spelling(annotation: str) -> str:
    for sync, asynchronous in SYNC_NAMES.items():
        annotation = annotation.replace(asynchronous, sync)
    return annotation


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=lambda c: c.__name__)
def test_same_public_names(sync: type, asynchronous: type) -> None:
    assert set(public(sync)) == set(public(asynchronous))


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=lambda c: c.__name__)
def test_same_signatures(sync: type, asynchronous: type) -> None:
    for name, member in public(sync).items():
        other = public(asynchronous)[name]
        if isinstance(member, property):
            assert isinstance(other, property), name
            continue
        assert params(member) == params(other), f"{sync.__name__}.{name} and {asynchronous.__name__}.{name} differ"
        sync_return = inspect.signature(member).return_annotation
        async_return = async_spelling(str(inspect.signature(other).return_annotation))
        assert str(sync_return) == async_return, f"{name} returns {sync_return} vs {async_return}"


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=lambda c: c.__name__)
def test_async_methods_are_coroutines_and_sync_ones_are_not(sync: type, asynchronous: type) -> None:
    for name, member in public(asynchronous).items():
        if isinstance(member, property):
            continue
        assert inspect.iscoroutinefunction(member) is (name not in NOT_COROUTINES), name
        assert not inspect.iscoroutinefunction(public(sync)[name]), name


@pytest.mark.parametrize(("sync", "asynchronous"), [p for p in PAIRS if p[0] is not Files], ids=lambda c: c.__name__)
def test_both_are_context_managers(sync: type, asynchronous: type) -> None:
    assert callable(getattr(sync, "__enter__", None)) and callable(getattr(sync, "__exit__", None))
    assert inspect.iscoroutinefunction(asynchronous.__aenter__) and inspect.iscoroutinefunction(asynchronous.__aexit__)


def test_constructors_match() -> None:
    assert params(Client.__init__) == params(AsyncClient.__init__)
    assert [p[0] for p in params(Client.__init__)] == ["self", "target", "token", "timeout"]
    assert inspect.signature(Client.__init__).parameters["target"].default == "127.0.0.1:50051"
    assert inspect.signature(Client.__init__).parameters["timeout"].default == 120


def test_the_surface_is_what_the_docs_promise() -> None:
    assert {"create", "get", "list", "snapshots", "delete_snapshot", "close"} <= set(public(Client))
    handle = {"id", "step", "step_stream", "observe", "exec", "reset", "renew", "snapshot", "refresh", "health", "logs"}
    assert handle | {"close"} <= set(public(Sandbox))  # plus the instance attributes `info` and `files`
    assert set(public(Files)) == {"read", "write", "list", "delete", "upload", "download"}


def test_lease_and_snapshot_signatures() -> None:
    def shape(fn: Any) -> list[tuple[str, Any, Any]]:
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    positional, keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    empty = inspect.Parameter.empty
    assert shape(Sandbox.renew) == [("self", positional, empty), ("ttl_s", positional, None)]
    assert shape(Sandbox.reset) == [("self", positional, empty), ("snapshot", positional, None)]
    assert shape(Sandbox.snapshot) == [("self", positional, empty), ("name", positional, empty), ("warm", keyword, 0)]
    assert shape(Client.snapshots) == [("self", positional, empty)]
    assert shape(Client.delete_snapshot) == [("self", positional, empty), ("name", positional, empty)]
    assert str(inspect.signature(Sandbox.snapshot).return_annotation) == "SnapshotInfo"
    assert str(inspect.signature(Client.snapshots).return_annotation) == "builtins.list[SnapshotInfo]"
