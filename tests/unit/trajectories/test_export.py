"""Trajectories to Parquet: a trajectory recorded into the local store, exported, loaded back with pandas."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from sandbox.models import ExecResult, Observation, SandboxKind, Screenshot
from sandbox.trajectories import LocalTrajectoryStore, TrajectoryInfo, TrajectoryStep
from sandbox.trajectories.export import STEP_COLUMNS, frames_path_for, to_parquet


def _shot(colour: tuple[int, int, int]) -> Screenshot:
    out = io.BytesIO()
    Image.new("RGB", (320, 200), colour).save(out, format="PNG")
    return Screenshot(data=out.getvalue(), width=320, height=200, format="png")


async def _recorded(store: LocalTrajectoryStore, trajectory_id: str, *, reward: float | None) -> None:
    info = TrajectoryInfo(
        id=trajectory_id, tenant="alpha", sandbox_id="sb-desk-1", kind=SandboxKind.DESKTOP, instance="in-desk-1",
        image="sandbox/desktop:latest", task_id="desktop-notes", task_digest="d" * 64, started_at=1000.0,
    )  # fmt: skip
    await store.create(info)
    red, green = _shot((255, 0, 0)), _shot((0, 255, 0))
    steps = [
        (None, Observation(timings_ms={"swap": 12.5}), red),
        ({"type": "exec", "cmd": "echo hi"}, Observation(exec=ExecResult(exit_code=0, stdout="hi\n", stderr="")), red),
        ({"type": "pyautogui", "code": "pyautogui.click(10, 20)"}, Observation(), green),
        ({"type": "done"}, Observation(done=True), green),
    ]
    for index, (action, obs, frame) in enumerate(steps):
        step = TrajectoryStep(index=index, at=1000.0 + index, action=action, observation=obs)
        await store.append("alpha", trajectory_id, step, frame, changes={"steps": index})
    await store.update("alpha", trajectory_id, {"done": True, "reason": "done", "ended_at": 1004.0})
    if reward is not None:
        await store.update("alpha", trajectory_id, {"reward": reward})


async def test_export_loads_with_pandas_one_row_per_step(tmp_path: Path) -> None:
    store = LocalTrajectoryStore(tmp_path / "store")
    await _recorded(store, "tr-00000000000000a1", reward=1.0)
    await _recorded(store, "tr-00000000000000b2", reward=None)
    trajectories = [await store.get(t, tenant=None) for t in ("tr-00000000000000a1", "tr-00000000000000b2")]

    def frame(trajectory_id: str, sha: str) -> bytes | None:
        found = store._frame(trajectory_id, sha, None)
        return found.data if found else None

    out = tmp_path / "out" / "steps.parquet"
    result = to_parquet([t for t in trajectories if t], out, frames=frame)
    assert (result.trajectories, result.rows, result.frames) == (2, 8, 2)
    assert result.frames_path == frames_path_for(out) == tmp_path / "out" / "steps.frames.parquet"

    steps = pd.read_parquet(out)
    assert list(steps.columns) == list(STEP_COLUMNS)
    first = steps[steps.trajectory_id == "tr-00000000000000a1"].sort_values("step")
    assert first.step.tolist() == [0, 1, 2, 3]
    assert first.action.isna().tolist() == [True, False, False, False]
    assert json.loads(first.action.iloc[2]) == {"type": "pyautogui", "code": "pyautogui.click(10, 20)"}
    assert first.action_type.tolist()[1:] == ["exec", "pyautogui", "done"]
    assert first.reward.tolist() == [0.0, 0.0, 0.0, 1.0] and set(first.episode_reward) == {1.0}
    assert first.done.tolist() == [False, False, False, True] and first.reason.iloc[3] == "done"
    assert first.text.iloc[1] == "hi\n" and json.loads(first.timings_ms.iloc[0]) == {"swap": 12.5}
    assert first.task_id.unique().tolist() == ["desktop-notes"] and first.kind.iloc[0] == "desktop"
    unscored = steps[steps.trajectory_id == "tr-00000000000000b2"]
    assert unscored.reward.isna().all()

    frames = pd.read_parquet(result.frames_path)
    assert sorted(frames.columns) == ["data", "format", "height", "sha256", "width"] and len(frames) == 2
    joined = steps.merge(frames, left_on="frame_sha256", right_on="sha256")
    assert len(joined) == 8
    assert Image.open(io.BytesIO(joined.data.iloc[0])).size == (320, 200)


@pytest.mark.parametrize("mode", ["inline", "none"])
async def test_frames_inline_or_left_out(tmp_path: Path, mode: str) -> None:
    store = LocalTrajectoryStore(tmp_path / "store")
    await _recorded(store, "tr-00000000000000c3", reward=0.0)
    trajectory = await store.get("tr-00000000000000c3", tenant="alpha")
    assert trajectory is not None
    out = tmp_path / "x.parquet"
    result = to_parquet([trajectory], out, frames=lambda t, s: store._frame(t, s, None).data, mode=mode)  # type: ignore[union-attr]
    steps = pd.read_parquet(out)
    assert result.frames_path is None and not frames_path_for(out).exists()
    if mode == "inline":
        assert steps.screenshot.map(len).gt(0).all()
    else:
        assert "screenshot" not in steps.columns and steps.frame_sha256.notna().all()
