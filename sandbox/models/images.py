"""Screenshot formats and their decoding: what ``Screenshot.image()`` does for each.

``png`` and ``jpeg`` are image files any viewer reads. ``zstd`` is the screen's pixels as the X server holds them,
compressed with Zstandard at level 1 (one frame, its content size in the header): ``width * height`` pixels of 4
bytes each, blue, green, red and an unused byte, row after row from the top. It costs the agent about 3 ms of CPU
for a whole new 1280x800 frame where PNG costs 11-13 ms, and is smaller than that PNG on screen content (66 KB to
90); its decoder is ``compression.zstd`` (Python 3.14's standard library) or else the ``zstandard`` package
(``sandbox[zstd]``).

Pillow (``sandbox[gym]`` or ``sandbox[server]``) builds the image; both are imported only when an image is decoded.
"""

from __future__ import annotations

import importlib
import io
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from PIL import Image

ImageFormat = Literal["png", "jpeg", "zstd"]
FORMATS: tuple[ImageFormat, ...] = ("png", "jpeg", "zstd")
BYTES_PER_PIXEL = 4
"""A ``zstd`` frame's pixels: B, G, R and an unused byte."""


def decode(data: bytes, format: str, width: int, height: int) -> Image.Image:
    """The screenshot as an RGB Pillow image."""
    from PIL import Image

    if format == "zstd":
        pixels = unzstd(data)
        if len(pixels) != width * height * BYTES_PER_PIXEL:
            raise ValueError(f"a {width}x{height} zstd screenshot holds {len(pixels)} bytes, not {width * height * 4}")
        return Image.frombuffer("RGB", (width, height), pixels, "raw", "BGRX", 0, 1)
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def unzstd(data: bytes) -> bytes:
    """The content of a Zstandard frame, through the standard library when it has a decoder (3.14), else
    ``zstandard``."""
    module: Any
    try:
        module = importlib.import_module("compression.zstd")
    except ImportError:
        try:
            module = importlib.import_module("zstandard")
        except ImportError as e:
            raise ImportError(
                "decoding a zstd screenshot needs Python 3.14's compression.zstd or the zstandard package: "
                "pip install 'sandbox[zstd]'"
            ) from e
    return bytes(module.decompress(data))


def to_png(data: bytes, width: int, height: int) -> bytes:
    """A ``zstd`` screenshot's pixels as a PNG (for viewers: trajectories keep their frames as images)."""
    out = io.BytesIO()
    decode(data, "zstd", width, height).save(out, "PNG", compress_level=1)
    return out.getvalue()
