"""The state store: versioned JSON documents (with compare-and-set), FIFO queues, leased locks and counters,
behind one interface.

``EmbeddedStore`` keeps one control plane's state in-process and in one JSON file; ``RedisStore`` shares it
between replicas. Open either from config with ``await open_store(config, logger=...)``. ``RedisStore`` is
importable from here, but ``redis`` is imported only when it is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox.store.base import Store, Stored, Versioned
from sandbox.store.config import EmbeddedStoreConfig, RedisStoreConfig, StoreConfig, default_state_path, open_store
from sandbox.store.embedded import EmbeddedStore

if TYPE_CHECKING:
    from sandbox.store.redis import RedisStore

__all__ = [
    "EmbeddedStore",
    "EmbeddedStoreConfig",
    "RedisStore",
    "RedisStoreConfig",
    "Store",
    "StoreConfig",
    "Stored",
    "Versioned",
    "default_state_path",
    "open_store",
]


def __getattr__(name: str) -> Any:
    if name == "RedisStore":
        from sandbox.store.redis import RedisStore

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
