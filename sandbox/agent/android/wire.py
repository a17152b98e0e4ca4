"""Just enough protocol buffers to speak the emulator controller's messages (``emulator_controller.proto`` here).

Standard library only: the agent runs under the image's python3, where Debian's grpcio may sit next to a protobuf
runtime of any age. The field numbers are the published proto's; the unit tests check every message here against
classes generated from the .proto.
"""

from __future__ import annotations

from collections.abc import Iterable

VARINT, LEN = 0, 2
Field = tuple[int, int | bytes | str | bool]
"""(field number, value): ints and bools as varints, bytes and str as length-delimited."""

SERVICE = "/android.emulation.control.EmulatorController/"

# ImageFormat.ImgFormat
PNG, RGBA8888, RGB888 = 0, 1, 2
# KeyboardEvent.KeyEventType
KEYDOWN, KEYUP, KEYPRESS = 0, 1, 2


def varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int32/int64 negatives take ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(fields: Iterable[Field]) -> bytes:
    """A message of ``fields``; zero ints, False and empty strings are left out as proto3 does."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bool | int):
            if value:
                out += varint(number << 3 | VARINT) + varint(int(value))
        else:
            data = value.encode() if isinstance(value, str) else value
            if data or isinstance(value, bytes):
                out += varint(number << 3 | LEN) + varint(len(data)) + data
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def decode(data: bytes) -> dict[int, list[int | bytes]]:
    """Field number → its values in order (varints as ints, length-delimited as bytes); fixed32/64 are skipped."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, kind = key >> 3, key & 7
        value: int | bytes
        if kind == VARINT:
            value, pos = _read_varint(data, pos)
        elif kind == LEN:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError("truncated field")
            value, pos = data[pos : pos + size], pos + size
        elif kind == 1:
            pos += 8
            continue
        elif kind == 5:
            pos += 4
            continue
        else:
            raise ValueError(f"unsupported wire type {kind}")
        fields.setdefault(number, []).append(value)
    return fields


def first_int(fields: dict[int, list[int | bytes]], number: int) -> int:
    values = [v for v in fields.get(number, []) if isinstance(v, int)]
    return values[-1] if values else 0


def first_bytes(fields: dict[int, list[int | bytes]], number: int) -> bytes:
    values = [v for v in fields.get(number, []) if isinstance(v, bytes)]
    return values[-1] if values else b""


# --------------------------------------------------------------------------- the messages


def touch_event(touches: Iterable[tuple[int, int, int, int]], display: int = 0) -> bytes:
    """``TouchEvent`` of ``Touch(x, y, identifier, pressure)``s; pressure 0 lifts that finger."""
    items = [(1, encode([(1, x), (2, y), (3, ident), (4, pressure)])) for x, y, ident, pressure in touches]
    return encode([*items, (2, display)])


def mouse_event(x: int, y: int, buttons: int, display: int = 0) -> bytes:
    return encode([(1, x), (2, y), (3, buttons), (4, display)])


def keyboard_event(*, key: str = "", text: str = "", event_type: int = KEYPRESS) -> bytes:
    """``KeyboardEvent``: a W3C ``key`` value (``Enter``, ``GoBack``, ``GoHome``, ``AppSwitch``) or ``text``."""
    return encode([(2, event_type), (4, key), (5, text)])


def image_format(fmt: int = PNG, width: int = 0, height: int = 0, display: int = 0) -> bytes:
    return encode([(1, fmt), (3, width), (4, height), (5, display)])


def parse_image(data: bytes) -> tuple[bytes, int, int, int]:
    """``Image`` → (pixels, width, height, format), the size from its ``ImageFormat``."""
    fields = decode(data)
    fmt = decode(first_bytes(fields, 1))
    return first_bytes(fields, 4), first_int(fmt, 3), first_int(fmt, 4), first_int(fmt, 1)


def parse_status(data: bytes) -> dict[str, object]:
    """``EmulatorStatus`` → version, uptime (ms), booted."""
    fields = decode(data)
    return {
        "version": first_bytes(fields, 1).decode(errors="replace"),
        "uptime_ms": first_int(fields, 2),
        "booted": bool(first_int(fields, 3)),
    }
