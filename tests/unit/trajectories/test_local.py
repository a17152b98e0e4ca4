"""The local trajectory store keeps a zstd screenshot as the PNG of its pixels, so every kept frame is an image."""

from __future__ import annotations

import io
import time
from pathlib import Path

import zstandard
from PIL import Image

from sandbox.models import Observation, SandboxKind, Screenshot
from sandbox.trajectories import LocalTrajectoryStore, TrajectoryInfo, TrajectoryStep


async def test_a_zstd_frame_is_kept_as_the_png_of_its_pixels(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path)
    meta = TrajectoryInfo(
        id="tr-00000000000000aa", tenant="alpha", sandbox_id="sb-desk-1", kind=SandboxKind.DESKTOP,
        instance="in-desk-1", image="sandbox/desktop:latest", task_id="t", task_digest="d" * 64,
        started_at=time.time(),
    )  # fmt: skip
    await store.create(meta)
    picture = Image.new("RGB", (32, 24), (200, 100, 50))
    data = zstandard.ZstdCompressor(level=1).compress(picture.tobytes("raw", "BGRX"))
    shot = Screenshot(data=data, width=32, height=24, format="zstd")
    for index in range(2):  # the same screen twice: one frame kept
        step = TrajectoryStep(index=index, at=time.time(), observation=Observation())
        await store.append("alpha", meta.id, step, shot)
    kept = await store.get(meta.id, tenant="alpha")
    assert kept is not None
    refs = {step.frame for step in kept.steps}
    assert len(refs) == 1
    (ref,) = refs
    assert ref is not None and (ref.format, ref.width, ref.height) == ("png", 32, 24)
    frame = await store.frame(meta.id, ref.sha256, tenant="alpha")
    assert frame is not None and frame.format == "png"
    with Image.open(io.BytesIO(frame.data)) as image:
        assert image.format == "PNG" and image.convert("RGB").tobytes() == picture.tobytes()
