"""The one error type handlers raise; the server turns it into an error frame."""

from __future__ import annotations

from typing import Any, TypeVar, overload

from sandbox.protocol import ErrorCode

T = TypeVar("T")
D = TypeVar("D")


class AgentError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def bad_request(message: str) -> AgentError:
    return AgentError(ErrorCode.BAD_REQUEST, message)


@overload
def require(args: dict[str, Any], name: str, kind: type[T]) -> T: ...
@overload
def require(args: dict[str, Any], name: str, kind: type[T], default: D) -> T | D: ...
@overload
def require(args: dict[str, Any], name: str, kind: tuple[type, ...], default: Any = ...) -> Any: ...
def require(args: dict[str, Any], name: str, kind: Any, default: Any = ...) -> Any:
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
