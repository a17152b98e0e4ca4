"""Requests whose bytes do not parse are the caller's error, answered as such.

grpc-python runs a method's request deserializer before the servicer sees anything; when it raises,
the server answers UNKNOWN and logs an ERROR with a traceback per request, so one client sending junk
floods the log. Here every deserializer is wrapped: bytes that do not parse become an :class:`Undecodable`
that the servicer turns into INVALID_ARGUMENT, with one short warning per interval at most.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc

from sandbox.errors import InvalidArgument

WARN_EVERY_S = 30.0
"""At most one warning about undecodable requests per this interval (the rest are counted in it)."""


class Undecodable:
    """A request message that did not parse; stands in for it so the servicer can answer."""

    def __init__(self, message_type: str, size: int, why: str) -> None:
        self.message_type = message_type
        self.size = size
        self.why = why

    def error(self) -> InvalidArgument:
        return InvalidArgument(
            f"the request is not a valid {self.message_type} message ({self.size} bytes): {self.why}"
        )


class _Recorder:
    """Takes the place of a server for a generated ``add_*Servicer_to_server`` to learn its handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, _handlers: Any) -> None:
        pass  # the same handlers come with add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.handlers[service] = handlers


class DecodeWarnings:
    """A rate-limited warning about requests that did not parse."""

    def __init__(self, logger: logging.Logger, *, every_s: float = WARN_EVERY_S) -> None:
        self._log = logger
        self._every_s = every_s
        self._last = -float("inf")
        self._quiet = 0

    def saw(self, method: str, request: Undecodable) -> None:
        now = time.monotonic()
        if now - self._last < self._every_s:
            self._quiet += 1
            return
        self._log.warning(
            "%s: a request that is not a valid %s (%d bytes) was refused%s",
            method,
            request.message_type,
            request.size,
            f"; {self._quiet} more since the last warning" if self._quiet else "",
            extra={"method": method},
        )
        self._last, self._quiet = now, 0


def _tolerant(parse: Callable[[bytes], Any], message_type: str) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as e:  # protobuf's DecodeError, or any other parse failure of foreign bytes
            return Undecodable(message_type, len(data), str(e) or type(e).__name__)

    return deserialize


def add_tolerant_servicer(servicer: object, server: grpc.aio.Server, add_to_server: Callable[[Any, Any], None]) -> None:
    """Register ``servicer`` with ``add_to_server`` (a generated ``add_*Servicer_to_server``), with every request
    deserializer returning :class:`Undecodable` instead of raising."""
    recorder = _Recorder()
    add_to_server(servicer, recorder)
    for service, handlers in recorder.handlers.items():
        wrapped = {}
        for name, handler in handlers.items():
            parse = handler.request_deserializer
            message_type = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
            type_name = message_type.full_name if message_type is not None else f"{service}.{name} request"
            wrapped[name] = handler._replace(request_deserializer=_tolerant(parse, type_name))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, wrapped),))
        server.add_registered_method_handlers(service, wrapped)
