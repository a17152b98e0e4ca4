"""What getters hand to metrics: a file's bytes with where they came from, and the metrics' way to read either."""

from __future__ import annotations

from typing import Any, NamedTuple


class FileData(NamedTuple):
    """A file a getter fetched (OSWorld's getters hand metrics a path to a local copy; here, the bytes).
    ``path`` is where it came from: a path in the sandbox, or a fixture's URL."""

    path: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def file_text(value: Any) -> str | None:
    """The text of a metric's file argument (a :class:`FileData`, or text as is); None when there is no file."""
    if isinstance(value, FileData):
        return value.text
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return value
    return None


def file_bytes(value: Any) -> bytes | None:
    if isinstance(value, FileData):
        return value.data
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return None
