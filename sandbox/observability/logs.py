"""Log output of the control plane: one JSON object per line for log collectors, or plain text for a person.

A JSON line carries ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, every field the call passed in
``extra=`` (``sandbox_id``, ``tenant``, ``instance``, ``operation``, ``duration_ms``, ``code``, …) and ``exc`` with
the traceback when there is one::

    {"ts": "2025-01-01T12:00:00.123Z", "level": "INFO", "logger": "sandbox.server", "message": "created sandbox
    term-0a1b2c3d4e5f on term-6a7b8c9d0e1f", "sandbox_id": "term-0a1b2c3d4e5f", "tenant": "alpha", ...}
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import sys
from typing import Any


class LogFormat(enum.StrEnum):
    AUTO = "auto"
    """Text for a person at a terminal, JSON when stderr goes to a file, a pipe or a collector."""
    JSON = "json"
    TEXT = "text"


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

# The attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_DROPPED = frozenset({"color_message"})  # uvicorn's copy of the message with terminal colours


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in _DROPPED and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def _timestamp(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def resolve_format(log_format: LogFormat) -> LogFormat:
    if log_format is not LogFormat.AUTO:
        return log_format
    return LogFormat.TEXT if sys.stderr.isatty() else LogFormat.JSON


def configure_logging(log_format: LogFormat = LogFormat.AUTO, *, level: int | str = logging.INFO) -> None:
    """Route the root logger to stderr in ``log_format`` (replacing handlers set before)."""
    handler = logging.StreamHandler(sys.stderr)
    json_lines = resolve_format(log_format) is LogFormat.JSON
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
