"""Bounded memos for values derived from immutable models on hot paths (a create in a burst of thousands).

Specs arrive identical again and again (every create of a rollout names the same spec), and their derived
values (the validated model, its pool key, its wire form) cost more CPU than the rest of a claim. A memo keeps the
newest ``size`` of them; the oldest is dropped first.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
V = TypeVar("V")

DEFAULT_SIZE = 256


class Memo(Generic[K, V]):
    """``get(key, make)``: ``make()``'s value for ``key``, made once while it stays among the newest ``size``.
    ``make`` raising stores nothing."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._values: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        try:
            return self._values[key]
        except KeyError:
            pass
        value = make()
        if len(self._values) >= self._size:
            del self._values[next(iter(self._values))]
        self._values[key] = value
        return value

    def __len__(self) -> int:
        return len(self._values)


class IdentityMemo(Generic[T, V]):
    """A memo keyed by an object's identity, for frozen objects that are not hashable (a model holding a dict).

    The object is kept with its value, so its ``id`` cannot be reused by another object while the entry lives."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._memo: Memo[tuple[int, Hashable], tuple[T, V]] = Memo(size)

    def get(self, obj: T, make: Callable[[], V], *, extra: Hashable = None) -> V:
        return self._memo.get((id(obj), extra), lambda: (obj, make()))[1]
