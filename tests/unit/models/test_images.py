"""Screenshot.image(): every format decodes to the same RGB picture; a zstd frame of the wrong size is refused."""

from __future__ import annotations

import io

import pytest
import zstandard
from PIL import Image, ImageDraw

from sandbox.models import Screenshot
from sandbox.models.images import FORMATS, decode, to_png, unzstd


def _picture() -> Image.Image:
    image = Image.new("RGB", (64, 40), (30, 60, 90))
    ImageDraw.Draw(image).rectangle((5, 7, 40, 20), fill=(250, 10, 120))
    return image


def _encoded(image: Image.Image, fmt: str) -> bytes:
    if fmt == "zstd":
        return zstandard.ZstdCompressor(level=1).compress(image.tobytes("raw", "BGRX"))
    out = io.BytesIO()
    image.save(out, fmt.upper(), **({"quality": 100} if fmt == "jpeg" else {}))
    return out.getvalue()


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_decodes_to_the_picture(fmt: str) -> None:
    picture = _picture()
    shot = Screenshot(data=_encoded(picture, fmt), width=64, height=40, format=fmt)  # type: ignore[arg-type]
    image = shot.image()
    assert (image.mode, image.size) == ("RGB", (64, 40))
    if fmt == "jpeg":  # lossy: near
        assert all(abs(a - b) <= 12 for a, b in zip(image.getpixel((20, 12)), (250, 10, 120), strict=True))
    else:
        assert image.tobytes() == picture.tobytes()


def test_a_zstd_frame_of_another_size_is_refused() -> None:
    data = _encoded(_picture(), "zstd")
    with pytest.raises(ValueError, match="64x41 zstd screenshot holds 10240 bytes"):
        decode(data, "zstd", 64, 41)


def test_zstd_frames_become_pngs_of_the_same_pixels() -> None:
    picture = _picture()
    png = to_png(_encoded(picture, "zstd"), 64, 40)
    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG" and image.convert("RGB").tobytes() == picture.tobytes()


def test_unzstd_reads_what_the_agent_writes() -> None:
    assert unzstd(zstandard.ZstdCompressor(level=1).compress(b"abc" * 1000)) == b"abc" * 1000
