"""FrameCache: a full-screen PNG deflates again only the bands whose pixels changed, and always decodes to the frame."""

from __future__ import annotations

import asyncio
import io
import random
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from PIL import Image, ImageDraw

from sandbox.agent.display.frames import Capture, FrameCache, Take

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


def _bgrx(image: Image.Image, rows: tuple[int, int] | None = None, asked: list[bool] | None = None) -> Capture:
    """A capture of ``image`` as the X thread hands it over: writable BGRX pixels, ``rows`` of them copied afresh
    (all of them unless given, and whenever the cache asks for the whole screen). Records in ``asked`` whether it
    did."""
    pixels = bytearray(image.convert("RGBX").tobytes("raw", "BGRX"))

    async def capture(take: Take, *, whole: bool, align: int) -> Any:
        assert align == 32
        if asked is not None:
            asked.append(whole)
        fresh = (0, image.height) if whole or rows is None else rows
        return take(memoryview(pixels), image.width, image.height, fresh)

    return capture


def _decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    image.load()
    return image.convert("RGB")


async def test_the_first_frame_encodes_every_band_and_decodes_to_its_pixels(pool: ThreadPoolExecutor) -> None:
    screen = _screen(1)
    encoded = await FrameCache(pool, band_rows=32).png(_bgrx(screen))
    assert (encoded.bands, encoded.reused) == (5, 0)
    assert _decoded(encoded.png).tobytes() == screen.tobytes()


async def test_an_unchanged_screen_reuses_every_band(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    screen = _bgrx(_screen(2))
    first = await cache.png(screen)
    again = await cache.png(screen)
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
    cache = FrameCache(pool, band_rows=32)
    before = _screen(3)
    await cache.png(_bgrx(before))
    after = before.copy()
    ImageDraw.Draw(after).rectangle(box, fill=(255, 0, 255))
    encoded = await cache.png(_bgrx(after))
    assert encoded.reused == encoded.bands - len(changed_bands)
    assert _decoded(encoded.png).tobytes() == after.tobytes()
    fresh = await FrameCache(pool, band_rows=32).png(_bgrx(after))
    assert _decoded(fresh.png).tobytes() == after.tobytes()


async def test_a_frame_of_another_size_starts_over(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    await cache.png(_bgrx(_screen(4)))
    smaller = _screen(4, (120, 64))
    encoded = await cache.png(_bgrx(smaller))
    assert (encoded.bands, encoded.reused) == (2, 0)
    assert _decoded(encoded.png).tobytes() == smaller.tobytes()


async def test_frames_encoded_at_once_each_decode_to_their_own_pixels(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    screens = [_screen(seed) for seed in range(6)]
    encoded = await asyncio.gather(*(cache.png(_bgrx(s)) for s in screens))
    for screen, result in zip(screens, encoded, strict=True):
        assert _decoded(result.png).tobytes() == screen.tobytes()


async def test_after_a_cancelled_frame_the_next_one_shows_its_own_pixels(pool: ThreadPoolExecutor) -> None:
    """The cancelled frame's pixels were taken but its bands never deflated: the cache must not pair them."""
    cache = FrameCache(pool, band_rows=32)
    first, second = _screen(5), _screen(6)
    await cache.png(_bgrx(first))
    task = asyncio.create_task(cache.png(_bgrx(second)))
    await asyncio.sleep(0)  # taken, deflating on a worker
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    again = await cache.png(_bgrx(second))
    assert _decoded(again.png).tobytes() == second.tobytes()


async def test_a_take_left_over_from_a_cancelled_frame_touches_no_later_frame(pool: ThreadPoolExecutor) -> None:
    """A cancelled frame's take still runs on the X thread, late, after the next frame was kept."""
    cache = FrameCache(pool, band_rows=32)
    await cache.png(_bgrx(_screen(8)))
    late_pixels = bytearray(_screen(9).convert("RGBX").tobytes("raw", "BGRX"))
    started, release = threading.Event(), threading.Event()
    jobs: list[Future[Any]] = []

    def late_take(take: Take) -> Any:
        started.set()
        release.wait(10)
        return take(memoryview(late_pixels), WIDTH, HEIGHT, (0, HEIGHT))

    with ThreadPoolExecutor(max_workers=1) as x_thread:

        async def slow_capture(take: Take, *, whole: bool, align: int) -> Any:
            jobs.append(x_thread.submit(late_take, take))
            return await asyncio.wrap_future(jobs[0])

        task = asyncio.create_task(cache.png(slow_capture))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        later = _screen(10)
        await cache.png(_bgrx(later))
        release.set()
        await asyncio.wrap_future(jobs[0])
    again = await cache.png(_bgrx(later))
    assert again.reused == again.bands
    assert _decoded(again.png).tobytes() == later.tobytes()


async def test_a_frame_cut_wrong_is_refused(pool: ThreadPoolExecutor) -> None:
    with pytest.raises(ValueError, match="a 200x150 BGRX frame has 120000 bytes, not 4"):
        await FrameCache(pool, band_rows=32).png(
            lambda take, whole, align: _async(take(memoryview(bytearray(4)), WIDTH, HEIGHT, (0, HEIGHT)))
        )


async def test_many_changed_bands_spread_over_the_pool_and_still_decode(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    screen = _screen(7, (WIDTH, 400))  # 13 bands
    await cache.png(_bgrx(screen))
    changed = screen.copy()
    ImageDraw.Draw(changed).rectangle((0, 0, 3, 399), fill=(1, 2, 3))  # a thin column through every band
    encoded = await cache.png(_bgrx(changed))
    assert (encoded.bands, encoded.reused) == (13, 0)
    assert _decoded(encoded.png).tobytes() == changed.tobytes()


async def _async(value: Any) -> Any:
    return value


async def test_scattered_changes_in_many_bands_reuse_the_rest_and_decode(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    screen = _screen(11, (WIDTH, 400))  # 13 bands, the last one 16 rows
    await cache.png(_bgrx(screen))
    changed = screen.copy()
    draw = ImageDraw.Draw(changed)
    for band in (0, 2, 3, 4, 7, 9, 12):  # runs of one and of three, the short last band among them
        draw.point((band * 7, band * 32 + 5), fill=(250, 250, 250))
    encoded = await cache.png(_bgrx(changed))
    assert (encoded.bands, encoded.reused) == (13, 6)
    assert _decoded(encoded.png).tobytes() == changed.tobytes()


async def test_only_the_rows_copied_afresh_are_compared(pool: ThreadPoolExecutor) -> None:
    """With the X server's damage, a capture copies only the rows drawn on: the others are the last frame's."""
    cache = FrameCache(pool, band_rows=32)
    before = _screen(12)
    await cache.png(_bgrx(before))
    after = before.copy()
    draw = ImageDraw.Draw(after)
    draw.rectangle((10, 70, 40, 80), fill=(255, 0, 255))  # in the third band, among the rows copied
    draw.rectangle((10, 5, 40, 10), fill=(0, 255, 0))  # in the first band, which the capture says it left alone
    encoded = await cache.png(_bgrx(after, rows=(64, 96)))
    assert encoded.reused == encoded.bands - 1
    expected = before.copy()
    ImageDraw.Draw(expected).rectangle((10, 70, 40, 80), fill=(255, 0, 255))
    assert _decoded(encoded.png).tobytes() == expected.tobytes()
    nothing = await cache.png(_bgrx(after, rows=(0, 0)))
    assert nothing.reused == nothing.bands and nothing.png == encoded.png


async def test_the_whole_screen_is_asked_for_until_there_is_a_last_frame(pool: ThreadPoolExecutor) -> None:
    cache = FrameCache(pool, band_rows=32)
    asked: list[bool] = []
    screen = _screen(13)
    await cache.png(_bgrx(screen, rows=(0, 0), asked=asked))
    await cache.png(_bgrx(screen, rows=(0, 0), asked=asked))
    assert asked == [True, False]
    cache.forget()
    encoded = await cache.png(_bgrx(screen, rows=(0, 0), asked=asked))
    assert asked == [True, False, True]
    assert _decoded(encoded.png).tobytes() == screen.tobytes()


async def test_a_first_frame_of_some_rows_only_is_refused(pool: ThreadPoolExecutor) -> None:
    async def partial(take: Take, *, whole: bool, align: int) -> Any:
        pixels = memoryview(bytearray(WIDTH * HEIGHT * 4))
        return take(pixels, WIDTH, HEIGHT, (32, 64))

    with pytest.raises(ValueError, match="needs all of its rows"):
        await FrameCache(pool, band_rows=32).png(partial)
