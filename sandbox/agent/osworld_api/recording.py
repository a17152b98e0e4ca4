"""``/start_recording`` and ``/end_recording``: a screen recording, as OSWorld's server makes one with ffmpeg.

The image has no ffmpeg: a thread captures the screen (pointer drawn in) ``FPS`` times a second, each frame a JPEG,
into an AVI file (Motion-JPEG, which every player reads). ``/end_recording`` stops it and sends the file
(``video/x-msvideo``; OSWorld's harness saves the bytes under the name it chose, ``.mp4`` or not). As on the VM:
starting while recording, or ending when not, answers 400.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import struct
import tempfile
import threading
import time
from typing import BinaryIO

from sandbox.agent.osworld_api.screen import capture
from sandbox.agent.osworld_api.web import HttpError, Request, Response, file_response, json_response

FPS = 5
JPEG_QUALITY = 70
AVIF_HASINDEX = 0x10
AVIIF_KEYFRAME = 0x10

log = logging.getLogger("sandbox.osworld_api")


class AviWriter:
    """A Motion-JPEG AVI written as frames come: the header's counts are filled in by ``close``."""

    def __init__(self, out: BinaryIO, width: int, height: int) -> None:
        self.out, self.width, self.height = out, width, height
        self.index: list[tuple[int, int]] = []  # (offset from 'movi', size) per frame
        self.started = time.monotonic()
        self._header(frames=0, usec_per_frame=1_000_000 // FPS, largest=0)
        self.movi_size_at = self.out.tell() + 4
        self.out.write(b"LIST" + struct.pack("<I", 4) + b"movi")
        self.movi_start = self.out.tell() - 4

    def _header(self, *, frames: int, usec_per_frame: int, largest: int) -> None:
        w, h = self.width, self.height
        avih = struct.pack("<14I", usec_per_frame, 0, 0, AVIF_HASINDEX, frames, 0, 1, largest, w, h, 0, 0, 0, 0)
        rate = max(1, round(1_000_000 / max(1, usec_per_frame)))
        strh = b"vidsMJPG" + struct.pack("<IHH6Iii4h", 0, 0, 0, 0, 1, rate, 0, frames, largest, -1, 0, 0, 0, w, h)
        strf = struct.pack("<IiiHH4sIiiII", 40, w, h, 1, 24, b"MJPG", w * h * 3, 0, 0, 0, 0)
        strl = b"strl" + _chunk(b"strh", strh) + _chunk(b"strf", strf)
        hdrl = b"hdrl" + _chunk(b"avih", avih) + _chunk(b"LIST", strl)
        self.out.seek(0)
        self.out.write(b"RIFF" + struct.pack("<I", 0) + b"AVI " + _chunk(b"LIST", hdrl))

    def add(self, jpeg: bytes) -> None:
        self.index.append((self.out.tell() - self.movi_start, len(jpeg)))
        self.out.write(_chunk(b"00dc", jpeg))

    def close(self) -> None:
        end = self.out.tell()
        self.out.write(
            _chunk(
                b"idx1", b"".join(b"00dc" + struct.pack("<III", AVIIF_KEYFRAME, off, size) for off, size in self.index)
            )
        )
        total = self.out.tell()
        frames = len(self.index)
        elapsed = time.monotonic() - self.started
        usec = round(elapsed * 1_000_000 / frames) if frames else 1_000_000 // FPS
        self._header(frames=frames, usec_per_frame=usec, largest=max((s for _, s in self.index), default=0))
        self.out.seek(4)
        self.out.write(struct.pack("<I", total - 8))
        self.out.seek(self.movi_size_at)
        self.out.write(struct.pack("<I", end - self.movi_start))
        self.out.flush()


def _chunk(fourcc: bytes, data: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(data)) + data + (b"\0" if len(data) % 2 else b"")


class Recorder:
    """At most one recording at a time (as on the VM), kept in a temporary file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._path = ""
        self._sent = ""
        self._error: str | None = None

    def start(self, _: Request) -> Response:
        with self._lock:
            if self._thread is not None:
                raise HttpError(400, {"status": "error", "message": "Recording is already in progress."})
            if self._sent:  # the last recording sent: one at a time is kept
                with contextlib.suppress(OSError):
                    os.unlink(self._sent)
            first = capture()
            fd, self._path = tempfile.mkstemp(prefix="osworld-recording-", suffix=".avi")
            out = os.fdopen(fd, "w+b")
            self._stop = threading.Event()
            self._error = None
            writer = AviWriter(out, *first.size)
            self._thread = threading.Thread(target=self._run, args=(writer, out, self._stop), daemon=True)
            self._thread.start()
        return json_response({"status": "success", "message": "Started recording."})

    def _run(self, writer: AviWriter, out: BinaryIO, stop: threading.Event) -> None:
        try:
            while True:
                began = time.monotonic()
                frame = io.BytesIO()
                capture().save(frame, "JPEG", quality=JPEG_QUALITY)
                writer.add(frame.getvalue())
                if stop.wait(max(0.0, 1 / FPS - (time.monotonic() - began))):
                    break
        except Exception as e:
            log.exception("the recording stopped")
            self._error = str(e)
        finally:
            writer.close()
            out.close()

    def end(self, _: Request) -> Response:
        with self._lock:
            if self._thread is None or self._stop is None:
                raise HttpError(400, {"status": "error", "message": "No recording in progress to stop."})
            self._stop.set()
            self._thread.join()
            self._thread = None
            path, self._path = self._path, ""
            self._sent = path
        if not os.path.getsize(path):
            raise HttpError(500, {"status": "error", "message": f"Recording failed: {self._error}"})
        return file_response(path, "video/x-msvideo")
