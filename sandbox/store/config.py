"""One config model per state store, discriminated by ``type``; a factory that imports ``redis`` only when the
Redis store is used."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox import environment

if TYPE_CHECKING:
    from sandbox.store.base import Store


def default_state_path() -> str:
    """``/var/lib/sandbox/state.json`` for root, else ``$XDG_STATE_HOME`` (``~/.local/state``)/sandbox/state.json."""
    if os.geteuid() == 0:
        return "/var/lib/sandbox/state.json"
    state_home = environment.state_home()
    return os.path.join(state_home, "sandbox", "state.json")


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddedStoreConfig(_Config):
    """State in the control-plane process, persisted to one JSON file: one replica only."""

    type: Literal["embedded"] = Field("embedded", description="Selects the embedded store.")
    path: str | None = Field(
        default_factory=default_state_path,
        description="The JSON state file (its directory is created; `<path>.lock` marks it in use). "
        "None keeps state in memory only: a restart loses it.",
    )
    flush_interval: float = Field(
        0.5,
        gt=0,
        le=60,
        description="Seconds within which non-durable writes (and locks taken or released) reach the file.",
    )
    reset_corrupt: bool = Field(
        False,
        description="On a corrupt state file, move it aside to `<path>.corrupt-<time>` and start empty "
        "instead of refusing to start.",
    )


class RedisStoreConfig(_Config):
    """State in Redis, shared by every control-plane replica pointed at the same database and namespace."""

    type: Literal["redis"] = Field("redis", description="Selects the Redis store.")
    url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="redis:// (or rediss://, unix://) URL of the server and database, password included if any.",
    )
    namespace: str = Field(
        "sandbox",
        pattern=r"^[a-zA-Z0-9_.-]{1,64}$",
        description="Prefix of every key (`<namespace>:doc:...`): control planes sharing it share state.",
    )
    timeout_s: float = Field(5.0, gt=0, le=300, description="Connect and per-command timeout, in seconds.")


StoreConfig = Annotated[EmbeddedStoreConfig | RedisStoreConfig, Field(discriminator="type")]


async def open_store(config: EmbeddedStoreConfig | RedisStoreConfig, *, logger: logging.Logger) -> Store:
    """The opened store: the embedded one loaded from its file, or Redis after a successful PING."""
    if isinstance(config, RedisStoreConfig):
        from sandbox.store.redis import RedisStore

        return await RedisStore.open(config.url, namespace=config.namespace, timeout_s=config.timeout_s, logger=logger)
    from sandbox.store.embedded import EmbeddedStore

    return await EmbeddedStore.open(
        config.path, flush_interval=config.flush_interval, reset_corrupt=config.reset_corrupt, logger=logger
    )
