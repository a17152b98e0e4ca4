"""FrameCache: a full-screen PNG deflates again only the bands whose pixels changed, and always decodes to the frame."""

from __future__ import annotations

import asyncio
import io
import random
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image, ImageDraw

from sandbox.agent.display.frames import FrameCache

WIDTH, HEIGHT = 200, 150  # 150 rows in bands of 32: four whole bands and one of 22 rows


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


def _screen(seed: int, size: tuple[int, int] = (WIDTH, HEIGHT)) -> Image.Image:
    rng = random.Random(seed)
    image = Image.new("RGB", size, (30, 60, 90))
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        draw.rectangle(
            (x, y, x + rng.randrange(40), y + rng.randrange(20)), fill=tuple(rng.randrange(256) for _ in "rgb")
        )
    return image


def _bgrx(image: Image.Image) -> bytes:
    return image.convert("RGBX").tobytes("raw", "BGRX")


def _decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.load()
    return image.convert("RGB")


async def test_the_first_frame_encodes_every_band_and_decodes_to_its_pixels(pool: ThreadPoolExecutor) -> None:
    screen = _screen(1)
    encoded = await FrameCache(pool).png(_bgrx(screen), WIDTH, HEIGHT)
    assert (encoded.bands, encoded.reused) == (5, 0)
    assert _decoded(encoded.png).tobytes() == screen.tobytes()


async def test_an_unchanged_screen_reuses_every_band(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool)
    screen = _bgrx(_screen(2))
    first = await cache.png(screen, WIDTH, HEIGHT)
    again = await cache.png(screen, WIDTH, HEIGHT)
    assert again.reused == again.bands == 5
    assert again.png == first.png


@pytest.mark.parametrize(
    ("box", "changed_bands"),
    [
        ((10, 40, 30, 50), {1}),  # rows 40-50: the second band only
        ((0, 0, 5, 0), {0}),  # one pixel row at the very top
        ((150, 140, 199, 149), {4}),  # the short last band, which ends the zlib stream
        ((50, 30, 60, 70), {0, 1, 2}),  # across band edges
    ],
)
async def test_a_change_deflates_only_its_bands_and_the_png_shows_it(
    pool: ThreadPoolExecutor, box: tuple[int, int, int, int], changed_bands: set[int]
) -> None:
    cache = FrameCache(pool)
    before = _screen(3)
    await cache.png(_bgrx(before), WIDTH, HEIGHT)
    after = before.copy()
    ImageDraw.Draw(after).rectangle(box, fill=(255, 0, 255))
    encoded = await cache.png(_bgrx(after), WIDTH, HEIGHT)
    assert encoded.reused == encoded.bands - len(changed_bands)
    assert _decoded(encoded.png).tobytes() == after.tobytes()
    fresh = await FrameCache(pool).png(_bgrx(after), WIDTH, HEIGHT)
    assert _decoded(fresh.png).tobytes() == after.tobytes()


async def test_a_frame_of_another_size_starts_over(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool)
    await cache.png(_bgrx(_screen(4)), WIDTH, HEIGHT)
    smaller = _screen(4, (120, 64))
    encoded = await cache.png(_bgrx(smaller), 120, 64)
    assert (encoded.bands, encoded.reused) == (2, 0)
    assert _decoded(encoded.png).tobytes() == smaller.tobytes()


async def test_frames_encoded_at_once_each_decode_to_their_own_pixels(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool)
    screens = [_screen(seed) for seed in range(6)]
    encoded = await asyncio.gather(*(cache.png(_bgrx(s), WIDTH, HEIGHT) for s in screens))
    for screen, result in zip(screens, encoded, strict=True):
        assert _decoded(result.png).tobytes() == screen.tobytes()


async def test_a_cancelled_frame_leaves_the_last_one_whole(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool)
    first = _screen(5)
    await cache.png(_bgrx(first), WIDTH, HEIGHT)
    task = asyncio.create_task(cache.png(_bgrx(_screen(6)), WIDTH, HEIGHT))
    await asyncio.sleep(0)  # inside the lock, waiting on a worker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    again = await cache.png(_bgrx(first), WIDTH, HEIGHT)
    assert again.reused == again.bands
    assert _decoded(again.png).tobytes() == first.tobytes()


async def test_a_frame_of_the_wrong_length_is_refused(pool: ThreadPoolExecutor) -> None:
    with pytest.raises(ValueError, match="200x150 BGRX frame has 120000 bytes, not 4"):
        await FrameCache(pool).png(b"\0" * 4, WIDTH, HEIGHT)
