"""Screenshot encoding: PNG written by hand from deflate bands compressed in parallel, JPEG through Pillow, and
``zstd``: the X server's BGRX pixels compressed with Zstandard (see ``sandbox.models.images``).

PNG rows are stored unfiltered and deflated at zlib level 1, the image split into horizontal bands compressed in
parallel and concatenated into one deflate stream (as pigz does). On screen content this is about 4x faster than
Pillow's PNG writer, whose adaptive row filters cost more than the compression itself, for a similar size. JPEG goes
through Pillow (libjpeg) at the requested quality.

A whole new 1280x800 frame costs one CPU 11-13 ms as PNG (converting BGRX to RGB 4 ms, deflating 8 ms, checksums and
filter bytes the rest) and about 3 ms as ``zstd`` at level 1 (capture included), which also comes out smaller (66 KB
against 90 KB of two xterms of text on a plain background): Zstandard's matches span the 4-byte pixels that deflate
at level 1 finds only partly, and the pixels need no conversion. The Debian package python3-zstandard is imported on
a first ``zstd`` screenshot only."""

from __future__ import annotations

import asyncio
import io
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from PIL import Image

PNG_ZLIB_LEVEL = 1
PNG_BANDS = max(1, min(4, len(os.sched_getaffinity(0))))
JPEG_DEFAULT_QUALITY = 80
ZSTD_LEVEL = 1
_zstd = threading.local()  # a compressor per thread: one is not to be used by two at once

Deflater = Any  # zlib's compressor object, which the zlib module does not name
Band = tuple[bytes, int, int]
"""One deflated band: (raw deflate data, adler32 of its uncompressed bytes, their length)."""


async def encode_png(image: Image.Image, pool: Executor, bands: int = PNG_BANDS) -> bytes:
    """``image`` (RGB) as a PNG, its bands deflated on ``pool``."""
    loop = asyncio.get_running_loop()
    h = image.height
    bounds = [(h * i // bands, h * (i + 1) // bands) for i in range(bands)]
    bounds = [(top, bottom) for top, bottom in bounds if bottom > top]
    deflated = await asyncio.gather(
        *(
            loop.run_in_executor(pool, deflate_band, image, top, bottom, i == len(bounds) - 1)
            for i, (top, bottom) in enumerate(bounds)
        )
    )
    return png(image.width, image.height, deflated)


async def encode_jpeg(image: Image.Image, quality: int, pool: Executor) -> bytes:
    return await asyncio.get_running_loop().run_in_executor(pool, jpeg, image, quality)


def jpeg(image: Image.Image, quality: int) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def pil() -> Any:
    """Pillow's ``Image`` module, imported on the first screenshot: an idle desktop's agent holds none of it (about
    0.5 MB of its memory; the rest of Pillow is shared library pages)."""
    from PIL import Image

    return Image


def zstd(pixels: Any) -> bytes:
    """``pixels`` (any buffer) as one Zstandard frame that records its size."""
    compressor = getattr(_zstd, "compressor", None)
    if compressor is None:
        import zstandard  # the Debian package, only when this format is asked for

        compressor = _zstd.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return bytes(compressor.compress(pixels))


def bgrx(image: Image.Image) -> bytes:
    """An RGB image's pixels as the X server holds them (what a ``zstd`` screenshot compresses)."""
    return image.tobytes("raw", "BGRX")


def deflate_band(image: Image.Image, top: int, bottom: int, last: bool) -> Band:
    """Deflate rows [top, bottom) of an RGB image with PNG filter type 0."""
    return deflate_rows(image.crop((0, top, image.width, bottom)).tobytes(), image.width * 3, last=last)


def deflate_rows(pixels: bytes, stride: int, *, last: bool) -> Band:
    """Deflate rows of ``stride`` bytes each, every row prefixed with PNG filter type 0 (none)."""
    return deflate_filtered(filtered_rows(pixels, stride), new_deflater(), last=last)


def filtered_rows(pixels: bytes, stride: int) -> bytes:
    """Rows of ``stride`` bytes each, every one prefixed with PNG filter type 0 (none)."""
    return b"".join([b"\0" + pixels[i : i + stride] for i in range(0, len(pixels), stride)])


def deflate_filtered(rows: bytes | memoryview, deflater: Deflater, *, last: bool) -> Band:
    """One band of filtered rows. ``deflater`` may be shared by bands deflated one after another (allocating one
    costs more than deflating a band of 32 rows): a full flush ends each band, so the next refers to nothing before
    it and every band's bytes stand alone, as if a compressor of its own had made them. Either flush ends a band on
    a byte boundary without closing the stream, so bands concatenate. After the ``last`` band it is finished."""
    data = deflater.compress(rows) + deflater.flush(zlib.Z_FINISH if last else zlib.Z_FULL_FLUSH)
    return data, zlib.adler32(rows), len(rows)


def new_deflater() -> Deflater:
    return zlib.compressobj(PNG_ZLIB_LEVEL, zlib.DEFLATED, -15)


def png(width: int, height: int, bands: Sequence[Band]) -> bytes:
    """An 8-bit RGB PNG whose one IDAT holds ``bands`` (in order, the last one finished) as one zlib stream."""
    checksum = bands[0][1]
    for _, adler, length in bands[1:]:
        checksum = adler32_combine(checksum, adler, length)
    idat = b"\x78\x01" + b"".join(band[0] for band in bands) + struct.pack(">I", checksum)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))


def adler32_combine(adler1: int, adler2: int, length2: int) -> int:
    """Adler-32 of A+B from those of A and B (zlib's adler32_combine, which Python does not expose)."""
    base = 65521
    rem = length2 % base
    sum1 = adler1 & 0xFFFF
    sum2 = rem * sum1 % base
    sum1 += (adler2 & 0xFFFF) + base - 1
    sum2 += (adler1 >> 16) + (adler2 >> 16) + base - rem
    return (sum1 % base) | ((sum2 % base) << 16)
