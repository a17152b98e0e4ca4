"""The one error type handlers raise; the server turns it into an error frame."""

from __future__ import annotations

from sandbox.protocol import ErrorCode


class AgentError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def bad_request(message: str) -> AgentError:
    return AgentError(ErrorCode.BAD_REQUEST, message)


def require(args: dict, name: str, kind: type | tuple[type, ...], default: object = ...) -> object:
    """Fetch and type-check one argument of a request."""
    if name not in args or args[name] is None:
        if default is ...:
            raise bad_request(f"missing argument {name!r}")
        return default
    value = args[name]
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise bad_request(f"argument {name!r} must be a number, got a boolean")
    if not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise bad_request(f"argument {name!r} must be {expected}, got {type(value).__name__}")
    return value
