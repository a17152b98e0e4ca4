"""``FrameCache``: a full-screen PNG deflates again only the bands of rows whose pixels changed since the last one;
``PixelFrames``: a full-screen ``zstd`` screenshot compresses the screen again only when a row of it was drawn on.

Between two agent steps most of a screen stays as it was (a menu opens, a line of text appears). The screen is cut
into bands of ``BAND_ROWS`` rows, each deflated on its own and ended on a byte boundary, so the bands concatenate
into one zlib stream (see ``encoders.png``). The cache keeps the last frame's raw pixels (about 4 MB at 1280x800) and
its deflated bands. On the capture thread, each band of the new frame among the rows the capture copied (those drawn
on, see ``damage``) is compared with the kept one (``memcmp``) and only a changed band is copied over; then only the
changed bands are converted and deflated. Bands of 16 rows: a line of text typed is one or two of them, half the
deflating that bands of 32 rows cost, for a PNG about 2% larger. The kept buffer is
reused frame after frame: a fresh 4 MB per capture would cost about a thousand page faults.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, cast

from sandbox.agent.display.encoders import (
    PNG_BANDS,
    Band,
    deflate_filtered,
    filtered_rows,
    new_deflater,
    pil,
    png,
    zstd,
)

BAND_ROWS = 16
BYTES_PER_PIXEL = 4  # the X server's BGRX
INLINE_BANDS = 3
"""Up to this many changed bands are deflated right where they were found, on the capture thread (no more thread
hand-offs: most frames after an action); more are spread over the pool."""

_libc = ctypes.CDLL(None)
_libc.memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
_libc.memcmp.restype = ctypes.c_int


@dataclass
class _Kept:
    """The last frame: its BGRX pixels and each band's deflated bytes."""

    width: int
    height: int
    band_rows: int
    pixels: bytearray
    bands: list[Band] = field(default_factory=list)
    png: bytes = b""  # the PNG these bands make, once assembled

    @property
    def stride(self) -> int:
        return self.width * BYTES_PER_PIXEL

    def spans(self) -> list[tuple[int, int]]:
        """Each band's (offset, length) in bytes."""
        step = self.band_rows * self.stride
        return [(top, min(step, len(self.pixels) - top)) for top in range(0, len(self.pixels), step)]


@dataclass(frozen=True)
class Encoded:
    png: bytes
    width: int
    height: int
    bands: int
    reused: int


@dataclass(frozen=True)
class Taken:
    kept: _Kept
    changed: list[int]
    deflated: list[Band] | None
    """The changed bands' deflated bytes, when they were few enough to deflate on the capture thread."""


Take = Callable[[memoryview, int, int, tuple[int, int]], Taken]
"""Called on the capture thread with the screen's BGRX pixels (a writable buffer), its width, its height, and the
rows ``[top, bottom)`` copied afresh (the others are assumed unchanged since the last frame)."""


class Capture(Protocol):
    def __call__(self, take: Take, *, whole: bool, align: int) -> Awaitable[Taken]:
        """Grab the screen (all of it if ``whole``, else at least the rows drawn on since the last grab, widened to
        multiples of ``align``) and return ``take(...)`` called on the thread that owns the pixels, before anything
        overwrites them."""
        ...


class FrameCache:
    def __init__(self, pool: Executor, *, workers: int = PNG_BANDS, band_rows: int = BAND_ROWS) -> None:
        self._pool = pool
        self._workers = workers
        self._band_rows = band_rows
        self._kept: _Kept | None = None
        self._lock = asyncio.Lock()  # one frame at a time compares with, and replaces, the last one

    async def png(self, capture: Capture) -> Encoded:
        """The PNG of the screen, from the rows ``capture`` copied and the last frame's others."""
        async with self._lock:
            try:
                take = partial(_take, self._kept, self._band_rows)
                taken = await capture(take, whole=self._kept is None, align=self._band_rows)
                kept, changed, done = taken.kept, taken.changed, taken.deflated
                if done is None:
                    done = await self._spread(kept, changed)
            except BaseException:
                # A take may have copied pixels whose bands were never deflated: start over next time.
                self._kept = None
                raise
            for index, band in zip(changed, done, strict=True):
                kept.bands[index] = band
            self._kept = kept
            if changed or not kept.png:
                kept.png = png(kept.width, kept.height, kept.bands)
            count = len(kept.bands)
            return Encoded(kept.png, kept.width, kept.height, count, count - len(changed))

    def forget(self) -> None:
        self._kept = None

    async def _spread(self, kept: _Kept, changed: list[int]) -> list[Band]:
        loop = asyncio.get_running_loop()
        n = len(changed)  # adjacent bands stay together: a run is converted and filtered in one go
        groups = [changed[n * k // self._workers : n * (k + 1) // self._workers] for k in range(self._workers)]
        deflated = await asyncio.gather(*(loop.run_in_executor(self._pool, _deflate_bands, kept, g) for g in groups))
        return [band for bands in deflated for band in bands]


PixelsOf = Callable[..., tuple[memoryview, int, int, tuple[int, int]]]
"""``XSession.screen_pixels``: called with ``whole=`` and ``reader=``."""


@dataclass(frozen=True)
class Compressed:
    data: bytes
    width: int
    height: int
    reused: bool


class PixelFrames:
    """The last ``zstd`` frame of the screen. Used only on the X thread, where the pixels are: a whole new 1280x800
    frame compresses in about 2 ms, less than handing the 4 MB to another thread would save."""

    READER = "zstd"

    def __init__(self) -> None:
        self._last: Compressed | None = None

    def take(self, pixels_of: PixelsOf) -> Compressed:
        """The screen's frame: compressed anew when a row of it was drawn on since the last one, else that one."""
        last, self._last = self._last, None  # forgotten until this one is made: a failure starts afresh
        pixels, width, height, rows = pixels_of(whole=last is None, reader=self.READER)
        if last is not None and (last.width, last.height) == (width, height) and rows[1] <= rows[0]:
            self._last = Compressed(last.data, width, height, reused=True)
        else:
            self._last = Compressed(zstd(pixels), width, height, reused=False)
        return self._last

    def forget(self) -> None:
        self._last = None


def _take(
    kept: _Kept | None, band_rows: int, pixels: memoryview, width: int, height: int, rows: tuple[int, int]
) -> Taken:
    """The bands of ``pixels`` among ``rows`` compared with ``kept``'s and the changed ones copied into it (a whole
    new buffer when there is none of this size); a few changed bands are deflated here too."""
    expected = width * height * BYTES_PER_PIXEL
    if len(pixels) != expected:
        raise ValueError(f"a {width}x{height} BGRX frame has {expected} bytes, not {len(pixels)}")
    if kept is None or (kept.width, kept.height) != (width, height):
        if rows != (0, height):
            raise ValueError(f"a first {width}x{height} frame needs all of its rows, not {rows}")
        fresh = _Kept(width, height, band_rows, bytearray(pixels))
        fresh.bands = [(b"", 1, 0)] * len(fresh.spans())
        return Taken(fresh, list(range(len(fresh.bands))), None)
    source = ctypes.addressof(ctypes.c_char.from_buffer(pixels))
    target = ctypes.addressof(ctypes.c_char.from_buffer(kept.pixels))
    spans = kept.spans()
    changed = []
    for index in range(rows[0] // band_rows, min(len(spans), -(-rows[1] // band_rows))):
        offset, length = spans[index]
        if _libc.memcmp(source + offset, target + offset, length) != 0:
            ctypes.memmove(target + offset, source + offset, length)
            changed.append(index)
    return Taken(kept, changed, _deflate_bands(kept, changed) if len(changed) <= INLINE_BANDS else None)


def _deflate_bands(kept: _Kept, indexes: Sequence[int]) -> list[Band]:
    """The deflated bytes of bands ``indexes`` (ascending): each run of adjacent bands converted and filtered in
    one go, then deflated band by band through one compressor."""
    spans = kept.spans()
    out_stride = kept.width * 3 + 1  # RGB and the filter byte
    deflater = new_deflater()
    out = []
    for run in _runs(indexes):
        offset = spans[run[0]][0]
        length = sum(spans[i][1] for i in run)
        # A ctypes view, not a memoryview: older Pillow decodes only buffers that need no release.
        pixels = (ctypes.c_char * length).from_buffer(kept.pixels, offset)
        size = (kept.width, length // kept.stride)
        rgb = pil().frombuffer("RGB", size, cast(bytes, pixels), "raw", "BGRX", 0, 1).tobytes()
        rows = memoryview(filtered_rows(rgb, kept.width * 3))
        start = 0
        for i in run:
            end = start + spans[i][1] // kept.stride * out_stride
            last = i == len(spans) - 1
            out.append(deflate_filtered(rows[start:end], deflater, last=last))
            if last:
                deflater = new_deflater()
            start = end
    return out


def _runs(indexes: Sequence[int]) -> list[list[int]]:
    """``indexes`` (ascending) cut where they stop being consecutive."""
    runs: list[list[int]] = []
    for i in indexes:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
