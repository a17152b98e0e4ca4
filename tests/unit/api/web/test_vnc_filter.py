"""The view-only RFB filter: handshake and display requests pass, input never does, at any split."""

from __future__ import annotations

import struct

import pytest

from sandbox.api.web.vnc_proxy import RfbViolation, ViewOnlyFilter

HANDSHAKE = b"RFB 003.008\n" + b"\x01" + b"\x01"  # version, security None, ClientInit(shared)
SET_PIXEL_FORMAT = b"\x00\x00\x00\x00" + bytes(range(16))
SET_ENCODINGS = struct.pack(">BxH3i", 2, 3, 7, -223, 0)
UPDATE_REQUEST = struct.pack(">BB4H", 3, 1, 0, 0, 1024, 768)
KEY = struct.pack(">BBxxI", 4, 1, 0x61)
POINTER = struct.pack(">BBHH", 5, 1, 300, 200)
CUT_TEXT = struct.pack(">Bxxxi", 6, 5) + b"hello"
CUT_TEXT_EXTENDED = struct.pack(">Bxxxi", 6, -8) + b"\x00" * 8
FENCE = struct.pack(">BxxxIB", 248, 0, 3) + b"abc"
SET_DESKTOP_SIZE = struct.pack(">BxHHBx", 251, 800, 600, 1) + b"\x00" * 16
QEMU_KEY = struct.pack(">BBHII", 255, 0, 1, 0x61, 30)

DISPLAY_ONLY = HANDSHAKE + SET_PIXEL_FORMAT + SET_ENCODINGS + UPDATE_REQUEST + FENCE + UPDATE_REQUEST
INPUT = [KEY, POINTER, CUT_TEXT, CUT_TEXT_EXTENDED, SET_DESKTOP_SIZE, QEMU_KEY]


def interleaved() -> tuple[bytes, bytes]:
    """A stream mixing every input message among display requests, and what should come out."""
    stream, expected = bytearray(HANDSHAKE + SET_ENCODINGS), bytearray(HANDSHAKE + SET_ENCODINGS)
    for message in INPUT:
        stream += message + UPDATE_REQUEST
        expected += UPDATE_REQUEST
    return bytes(stream), bytes(expected)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1000])
def test_input_is_dropped_and_everything_else_passes_at_any_split(chunk: int) -> None:
    stream, expected = interleaved()
    gate = ViewOnlyFilter()
    out = b"".join(gate.feed(stream[i : i + chunk]) for i in range(0, len(stream), chunk))
    assert out == expected
    assert gate.dropped == len(INPUT)


def test_a_display_only_stream_passes_unchanged() -> None:
    gate = ViewOnlyFilter()
    assert gate.feed(DISPLAY_ONLY) == DISPLAY_ONLY and gate.dropped == 0


def test_vnc_auth_response_passes() -> None:
    gate = ViewOnlyFilter()
    stream = b"RFB 003.008\n\x02" + b"r" * 16 + b"\x01" + POINTER + UPDATE_REQUEST
    assert gate.feed(stream) == b"RFB 003.008\n\x02" + b"r" * 16 + b"\x01" + UPDATE_REQUEST


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (b"RFB 003.003\n", "version"),
        (b"RFB 003.008\n\x10", "security type"),
        (HANDSHAKE + b"\x07", "unknown"),
        (HANDSHAKE + b"\xff\x01", "QEMU"),
    ],
)
def test_a_stream_the_filter_cannot_follow_is_refused(stream: bytes, why: str) -> None:
    with pytest.raises(RfbViolation, match=why):
        ViewOnlyFilter().feed(stream)
