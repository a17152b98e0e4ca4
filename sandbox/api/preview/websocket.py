"""A preview's websocket relay: the caller's websocket (ASGI) ↔ a websocket client over the agent's tunnel.

The handshake goes to the app first (with the caller's subprotocols and headers, less the platform's); only when
the app accepts is the caller accepted, with the subprotocol the app chose. Then messages flow both ways, each
re-framed (``websockets``' sans-I/O client on the tunnel side), until either side closes; the close code passes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.websockets import WebSocket
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from sandbox.api.ws_relay import run_both_ways

CHUNK = 1 << 16
WS_GOING_AWAY = 1001
WS_INTERNAL_ERROR = 1011
_SKIPPED = {b"host", b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions", b"upgrade"}


async def relay_websocket(
    websocket: WebSocket,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    target: str,
    headers: list[tuple[bytes, bytes]],
    logger: logging.Logger,
) -> None:
    offered = list(websocket.scope.get("subprotocols") or [])
    protocol = ClientProtocol(parse_uri("ws://localhost" + target), subprotocols=offered or None)
    request = protocol.connect()
    del request.headers["Host"]  # connect() set it from the URI: replace it, not add a second one
    request.headers["Host"] = websocket.headers.get("host", "localhost")
    for name, value in headers:
        if name not in _SKIPPED and name != b"sec-websocket-protocol":
            request.headers[name.decode("latin-1")] = value.decode("latin-1")
    protocol.send_request(request)

    def flush() -> None:
        for data in protocol.data_to_send():
            if data:
                writer.write(data)

    flush()
    response, pending = await _handshake(protocol, reader)
    if response is None or response.status_code != 101 or protocol.handshake_exc is not None:
        status = response.status_code if response is not None else "no answer"
        await websocket.close(WS_INTERNAL_ERROR, f"the app refused the websocket ({status})")
        writer.close()
        return
    await websocket.accept(subprotocol=response.headers.get("Sec-WebSocket-Protocol"))

    async def downstream() -> None:
        opcode, parts = Opcode.TEXT, []
        events: list[object] = list(pending)  # frames that came with the handshake's answer
        data = b"-"
        while True:
            for event in events:
                if not isinstance(event, Frame):
                    continue
                if event.opcode is Opcode.CLOSE:
                    code = protocol.close_rcvd.code if protocol.close_rcvd is not None else 1000
                    await websocket.close(code if 1000 <= code < 5000 and code != 1005 else 1000)
                    return
                if event.opcode in (Opcode.TEXT, Opcode.BINARY):
                    opcode, parts = event.opcode, [event.data]
                elif event.opcode is Opcode.CONT:
                    parts.append(event.data)
                else:
                    continue  # ping and pong: answered by the protocol itself
                if event.fin:
                    payload = b"".join(parts)
                    if opcode is Opcode.TEXT:
                        await websocket.send_text(payload.decode())
                    else:
                        await websocket.send_bytes(payload)
            if not data:
                await websocket.close(WS_GOING_AWAY)
                return
            data = await reader.read(CHUNK)
            if data:
                protocol.receive_data(data)
            else:
                protocol.receive_eof()
            flush()
            events = list(protocol.events_received())

    async def upstream() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                with contextlib.suppress(Exception):
                    protocol.send_close(message.get("code", 1000) if message.get("code") != 1005 else 1000)
                    flush()
                    await writer.drain()
                return
            if message.get("text") is not None:
                protocol.send_text(message["text"].encode())
            elif message.get("bytes") is not None:
                protocol.send_binary(message["bytes"])
            flush()
            await writer.drain()

    await run_both_ways(
        upstream(),
        downstream(),
        websocket=websocket,
        writer=writer,
        logger=logger,
        what=f"preview websocket relay to {target}",
    )


async def _handshake(protocol: ClientProtocol, reader: asyncio.StreamReader) -> tuple[Response | None, list[object]]:
    """The app's answer to the upgrade request (None when it hung up first) and any frames that came with it."""
    while True:
        data = await reader.read(CHUNK)
        if data:
            protocol.receive_data(data)
        else:
            protocol.receive_eof()
        events: list[object] = list(protocol.events_received())
        for i, event in enumerate(events):
            if isinstance(event, Response):
                return event, events[i + 1 :]
        if not data:
            return None, []
