"""``FrameCache``: a full-screen PNG deflates again only the bands of rows whose pixels changed since the last one.

Between two agent steps most of a screen stays as it was (a menu opens, a line of text appears). The frame is cut
into bands of ``BAND_ROWS`` rows, each deflated on its own and ended on a byte boundary, so the bands concatenate
into one zlib stream (see ``encoders.png``). A band whose raw pixels are byte for byte those of the last frame keeps
its deflated bytes: no colour conversion, no compression. Only the last frame is kept (its raw pixels, about 4 MB at
1280x800, and its deflated bands); a frame of another size starts over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from PIL import Image

from sandbox.agent.display.encoders import PNG_BANDS, Band, deflate_rows, png

BAND_ROWS = 32
BYTES_PER_PIXEL = 4  # the X server's BGRX


@dataclass(frozen=True)
class _Frame:
    width: int
    height: int
    raw: list[bytes]  # BGRX pixels, one entry per band
    bands: list[Band]


@dataclass(frozen=True)
class Encoded:
    png: bytes
    bands: int
    reused: int


class FrameCache:
    def __init__(self, pool: Executor, *, workers: int = PNG_BANDS, band_rows: int = BAND_ROWS) -> None:
        self._pool = pool
        self._workers = workers
        self._band_rows = band_rows
        self._last: _Frame | None = None
        self._lock = asyncio.Lock()  # one frame at a time compares with, and replaces, the last one

    async def png(self, raw: bytes, width: int, height: int) -> Encoded:
        """The PNG of a ``width`` x ``height`` BGRX frame."""
        expected = width * height * BYTES_PER_PIXEL
        if len(raw) != expected:
            raise ValueError(f"a {width}x{height} BGRX frame has {expected} bytes, not {len(raw)}")
        loop = asyncio.get_running_loop()
        async with self._lock:
            last = self._last
            if last is not None and (last.width, last.height) != (width, height):
                last = None
            cut, changed = await loop.run_in_executor(self._pool, self._compare, raw, width, height, last)
            groups = [changed[i :: self._workers] for i in range(min(self._workers, len(changed)))]
            deflated = await asyncio.gather(
                *(loop.run_in_executor(self._pool, _deflate_bands, cut, group, width) for group in groups)
            )
            # Nothing is replaced before every band is done: a cancelled frame leaves the last one whole.
            bands = list(last.bands) if last is not None else [_EMPTY] * len(cut)
            for group, done in zip(groups, deflated, strict=True):
                for index, band in zip(group, done, strict=True):
                    bands[index] = band
            self._last = _Frame(width, height, cut, bands)
        return Encoded(png(width, height, bands), len(cut), len(cut) - len(changed))

    def forget(self) -> None:
        self._last = None

    def _compare(self, raw: bytes, width: int, height: int, last: _Frame | None) -> tuple[list[bytes], list[int]]:
        stride = width * BYTES_PER_PIXEL
        step = self._band_rows * stride
        cut = [raw[top : top + step] for top in range(0, height * stride, step)]
        if last is None:
            return cut, list(range(len(cut)))
        return cut, [i for i, band in enumerate(cut) if band != last.raw[i]]


_EMPTY: Band = (b"", 1, 0)


def _deflate_bands(cut: Sequence[bytes], indexes: Sequence[int], width: int) -> list[Band]:
    last = len(cut) - 1
    out = []
    for i in indexes:
        rows = len(cut[i]) // (width * BYTES_PER_PIXEL)
        rgb = Image.frombuffer("RGB", (width, rows), cut[i], "raw", "BGRX", 0, 1).tobytes()
        out.append(deflate_rows(rgb, width * 3, last=i == last))
    return out
