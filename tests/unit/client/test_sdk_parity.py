"""The sync and async SDKs have the same public surface: the same methods, each with the same
parameters (names, kinds, defaults) and the same types (resolved, with each async class read as
its sync twin); the async ones are coroutines (or async context managers), the sync ones are not."""

from __future__ import annotations

import functools
import inspect
import operator
import typing
from types import UnionType
from typing import Any

import pytest

from sandbox.client import (
    AsyncClient,
    AsyncFiles,
    AsyncLane,
    AsyncSandbox,
    AsyncStepStream,
    AsyncTrajectories,
    Client,
    Files,
    Lane,
    Sandbox,
    StepStream,
    Trajectories,
)
from sandbox.models import SnapshotInfo

PAIRS = [
    (Client, AsyncClient),
    (Sandbox, AsyncSandbox),
    (Files, AsyncFiles),
    (StepStream, AsyncStepStream),
    (Lane, AsyncLane),
    (Trajectories, AsyncTrajectories),
]
# Methods that hand back an object rather than doing I/O: plain functions in both.
NOT_COROUTINES = {"step_stream", "lane"}
SYNC_TWIN: dict[type, type] = {asynchronous: sync for sync, asynchronous in PAIRS}


def public(cls: type) -> dict[str, Any]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


def params(fn: Any) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default, from the signature (not the annotations' text)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def types(fn: Any) -> dict[str, Any]:
    """The resolved parameter and return types, each async client class as its sync twin (inside generics and
    unions too: ``list[AsyncSandbox]``, ``Iterable[tuple[AsyncSandbox | str, ...]]``)."""
    return {name: _as_sync(hint) for name, hint in typing.get_type_hints(fn).items()}


def _as_sync(hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is None or not args or origin in (typing.Literal, typing.Annotated):
        return SYNC_TWIN.get(hint, hint) if isinstance(hint, type) else hint
    inner = tuple(_as_sync(arg) for arg in args)
    if origin in (typing.Union, UnionType):
        return functools.reduce(operator.or_, inner)
    return origin[inner]


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
        assert types(member) == types(other), f"{sync.__name__}.{name} and {asynchronous.__name__}.{name} differ"


@pytest.mark.parametrize(("sync", "asynchronous"), PAIRS, ids=lambda c: c.__name__)
def test_async_methods_are_coroutines_and_sync_ones_are_not(sync: type, asynchronous: type) -> None:
    for name, member in public(asynchronous).items():
        if isinstance(member, property):
            continue
        assert inspect.iscoroutinefunction(member) is (name not in NOT_COROUTINES), name
        assert not inspect.iscoroutinefunction(public(sync)[name]), name


@pytest.mark.parametrize(
    ("sync", "asynchronous"), [p for p in PAIRS if p[0] not in (Files, Trajectories)], ids=lambda c: c.__name__
)
def test_both_are_context_managers(sync: type, asynchronous: type) -> None:
    assert callable(getattr(sync, "__enter__", None)) and callable(getattr(sync, "__exit__", None))
    assert inspect.iscoroutinefunction(asynchronous.__aenter__) and inspect.iscoroutinefunction(asynchronous.__aexit__)


def test_constructors_match() -> None:
    assert params(Client.__init__) == params(AsyncClient.__init__)
    assert types(Client.__init__) == types(AsyncClient.__init__)
    assert [p[0] for p in params(Client.__init__)] == ["self", "target", "token", "timeout"]
    assert inspect.signature(Client.__init__).parameters["target"].default is None


def test_the_target_is_the_given_one_else_sandbox_target_else_make_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_TARGET", raising=False)
    assert Client().target == AsyncClient().target == "127.0.0.1:50051"
    monkeypatch.setenv("SANDBOX_TARGET", "127.0.0.1:6")
    assert Client().target == AsyncClient().target == "127.0.0.1:6"
    assert Client("127.0.0.1:7").target == "127.0.0.1:7"
    assert inspect.signature(Client.__init__).parameters["timeout"].default == 120


def test_the_surface_is_what_the_docs_promise() -> None:
    assert {"create", "get", "list", "snapshots", "delete_snapshot", "close"} <= set(public(Client))
    handle = {"id", "step", "step_stream", "observe", "exec", "reset", "renew", "snapshot", "refresh", "health", "logs"}
    handle |= {"evaluate"}
    assert handle | {"close"} <= set(public(Sandbox))  # plus the instance attributes `info` and `files`
    assert set(public(Files)) == {"read", "write", "list", "delete", "upload", "download"}
    assert set(public(Trajectories)) == {"list", "get", "frame", "media", "delete"}


def test_lease_and_snapshot_signatures() -> None:
    positional, keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
    empty = inspect.Parameter.empty
    assert params(Sandbox.renew) == [("self", positional, empty), ("ttl_s", positional, None)]
    assert params(Sandbox.reset) == [
        ("self", positional, empty),
        ("snapshot", positional, None),
        ("task", keyword, None),
        ("record", keyword, False),
    ]
    assert params(Sandbox.snapshot) == [("self", positional, empty), ("name", positional, empty), ("warm", keyword, 0)]
    assert params(Client.snapshots) == [("self", positional, empty)]
    assert params(Client.delete_snapshot) == [("self", positional, empty), ("name", positional, empty)]
    assert types(Sandbox.snapshot)["return"] is SnapshotInfo
    assert types(Client.snapshots)["return"] == list[SnapshotInfo]
