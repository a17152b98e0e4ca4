"""The store's config models, the default state path, and opening a store from config."""

from __future__ import annotations

import asyncio
import os
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from sandbox.store import (
    EmbeddedStore,
    EmbeddedStoreConfig,
    RedisStore,
    RedisStoreConfig,
    StoreConfig,
    default_state_path,
    open_store,
)
from tests.redis_server import RedisServer
from tests.unit.store.conftest import LOGGER, ROOT


def test_config_models_are_strict_and_documented() -> None:
    members = typing.get_args(typing.get_args(StoreConfig)[0])
    assert {m.__name__ for m in members} == {"EmbeddedStoreConfig", "RedisStoreConfig"}
    for member in members:
        assert issubclass(member, BaseModel)
        assert member.__doc__
        for name, info in member.model_fields.items():
            assert info.description, f"{member.__name__}.{name} has no description"
        kind = member.model_fields["type"].default
        assert isinstance(TypeAdapter(StoreConfig).validate_python({"type": kind}), member)
        with pytest.raises(ValidationError):
            member.model_validate({"type": kind, "no_such_field": 1})
    with pytest.raises(ValidationError):
        RedisStoreConfig(namespace="has:colon")


def test_default_state_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_state_path() == "/var/lib/sandbox/state.json"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_path() == str(tmp_path / "sandbox" / "state.json")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert EmbeddedStoreConfig().path == "/home/someone/.local/state/sandbox/state.json"


async def test_open_store_from_config(tmp_path: Path, redis_server: RedisServer) -> None:
    embedded = await open_store(EmbeddedStoreConfig(path=str(tmp_path / "s.json")), logger=LOGGER)
    assert isinstance(embedded, EmbeddedStore)
    await embedded.close()
    shared = await open_store(RedisStoreConfig(url=redis_server.url, namespace="cfg-test"), logger=LOGGER)
    assert isinstance(shared, RedisStore)
    assert await shared.counter("n") == 0
    await shared.close()


async def test_importing_the_store_does_not_import_redis() -> None:
    code = "import sys, sandbox.store; assert 'redis' not in sys.modules, 'redis imported'"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT)
    assert await child.wait() == 0
