"""Trajectories to Parquet, for ``pandas.read_parquet`` and ``datasets.load_dataset("parquet", ...)``.

One row per step (index 0 is the reset that started the episode, then one per action):

    trajectory_id, tenant, sandbox_id, kind, image, task_id, task_digest,    the episode
    step, at, action (JSON text, null for the reset), action_type,            the step
    reward (the episode's reward on its last step, 0 before; null if never evaluated), episode_reward,
    done, truncated, reason (on the last step of an ended episode), episode_steps,
    text (the command output the agent read), url, title, timings_ms (JSON text),
    frame_sha256, frame_format, width, height                                 the screenshot, by content hash

and the screenshots: ``frames="table"`` (the default) writes each distinct one once to ``<out>.frames.parquet``
(``sha256, format, width, height, data``; join on ``frame_sha256``), ``"inline"`` puts its bytes in the step's row
(column ``screenshot``), ``"none"`` keeps only the hashes. Needs ``pyarrow`` (``pip install 'sandbox[gym]'``).

Media (screen recordings, ``TrajectoryInfo.media``) are not exported, and no row changes for them: the steps file's
schema metadata lists them under ``sandbox.media`` (JSON: trajectory id -> its ``MediaRef``s, hashes and times;
``pyarrow.parquet.read_schema(out).metadata``); fetch them with ``sandbox trajectory media`` or
``client.trajectories.media``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sandbox.errors import FailedPrecondition
from sandbox.models import Observation
from sandbox.trajectories.models import Trajectory

MEDIA_METADATA = "sandbox.media"
"""The steps file's schema metadata key listing the exported trajectories' media (JSON)."""
FrameMode = Literal["table", "inline", "none"]
FrameSource = Callable[[str, str], bytes | None]
"""``frames(trajectory_id, sha256) -> bytes`` of a frame (None when it is gone)."""

STEP_COLUMNS = (
    "trajectory_id", "tenant", "sandbox_id", "kind", "image", "task_id", "task_digest", "step", "at", "action",
    "action_type", "reward", "episode_reward", "done", "truncated", "reason", "episode_steps", "text", "url", "title",
    "timings_ms", "frame_sha256", "frame_format", "width", "height",
)  # fmt: skip


@dataclass(frozen=True)
class ExportResult:
    steps_path: Path
    frames_path: Path | None
    trajectories: int
    rows: int
    frames: int
    media: int = 0
    """Media listed in the steps file's metadata (``sandbox.media``), not exported."""


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise FailedPrecondition("Parquet export needs pyarrow: pip install 'sandbox[gym]'") from None
    return pyarrow


def _text(obs: Observation) -> str | None:
    if obs.exec is None:
        return None
    return obs.exec.stdout + obs.exec.stderr


def step_rows(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory's rows (without screenshot bytes)."""
    info = trajectory.info
    last = len(trajectory.steps) - 1
    rows = []
    for position, step in enumerate(trajectory.steps):
        final = position == last and info.done
        reward = None if info.reward is None else info.reward if position == last else 0.0
        frame = step.frame
        rows.append(
            {
                "trajectory_id": info.id,
                "tenant": info.tenant,
                "sandbox_id": info.sandbox_id,
                "kind": info.kind.value,
                "image": info.image,
                "task_id": info.task_id,
                "task_digest": info.task_digest,
                "step": step.index,
                "at": step.at,
                "action": None if step.action is None else json.dumps(step.action, ensure_ascii=False),
                "action_type": None if step.action is None else str(step.action.get("type")),
                "reward": reward,
                "episode_reward": info.reward,
                "done": final,
                "truncated": final and info.truncated,
                "reason": info.reason if final else None,
                "episode_steps": info.steps,
                "text": _text(step.observation),
                "url": step.observation.url,
                "title": step.observation.title,
                "timings_ms": json.dumps(step.observation.timings_ms),
                "frame_sha256": frame.sha256 if frame else None,
                "frame_format": frame.format if frame else None,
                "width": frame.width if frame else None,
                "height": frame.height if frame else None,
            }
        )
    return rows


def frames_path_for(out: Path) -> Path:
    name = out.name.removesuffix(".parquet")
    return out.with_name(f"{name}.frames.parquet")


def to_parquet(
    trajectories: Iterable[Trajectory],
    out: str | Path,
    *,
    frames: FrameSource | None = None,
    mode: FrameMode = "table",
) -> ExportResult:
    """Write ``trajectories`` to ``out`` (and, in ``"table"`` mode, their frames beside it); ``frames`` fetches a
    frame's bytes (none are written without it)."""
    pa = _pyarrow()
    out = Path(out)
    rows: list[dict[str, Any]] = []
    kept: dict[str, dict[str, Any]] = {}
    inline: list[bytes | None] = []
    count = 0
    media: dict[str, list[dict[str, Any]]] = {}
    for trajectory in trajectories:
        count += 1
        if trajectory.info.media:
            media[trajectory.info.id] = [ref.model_dump(mode="json") for ref in trajectory.info.media]
        for row in step_rows(trajectory):
            sha = row["frame_sha256"]
            data = None
            if sha is not None and frames is not None and mode != "none":
                if sha in kept:
                    data = kept[sha]["data"]
                else:
                    data = frames(row["trajectory_id"], sha)
                    if data is not None:
                        kept[sha] = {"sha256": sha, "format": row["frame_format"], "width": row["width"],
                                     "height": row["height"], "data": data}  # fmt: skip
            inline.append(data)
            rows.append(row)
    columns: dict[str, list[Any]] = {name: [row[name] for row in rows] for name in STEP_COLUMNS}
    schema = _steps_schema(pa, inline=mode == "inline")
    if media:
        schema = schema.with_metadata({MEDIA_METADATA: json.dumps(media)})
    if mode == "inline":
        columns["screenshot"] = inline
    out.parent.mkdir(parents=True, exist_ok=True)
    pa.parquet.write_table(pa.table(columns, schema=schema), out)
    frames_path = None
    if mode == "table":
        frames_path = frames_path_for(out)
        ordered = sorted(kept.values(), key=lambda f: f["sha256"])
        table = pa.table(
            {name: [f[name] for f in ordered] for name in ("sha256", "format", "width", "height", "data")},
            schema=_frame_schema(pa),
        )
        pa.parquet.write_table(table, frames_path)
    return ExportResult(out, frames_path, count, len(rows), len(kept), sum(map(len, media.values())))


def _frame_schema(pa: Any) -> Any:
    fields = [("sha256", pa.string()), ("format", pa.string()), ("width", pa.int32()), ("height", pa.int32())]
    return pa.schema([*fields, ("data", pa.binary())])


def _steps_schema(pa: Any, *, inline: bool) -> Any:
    types = {
        "step": pa.int32(), "at": pa.float64(), "reward": pa.float64(), "episode_reward": pa.float64(),
        "done": pa.bool_(), "truncated": pa.bool_(), "episode_steps": pa.int32(), "width": pa.int32(),
        "height": pa.int32(),
    }  # fmt: skip
    fields = [(name, types.get(name, pa.string())) for name in STEP_COLUMNS]
    if inline:
        fields.append(("screenshot", pa.binary()))
    return pa.schema(fields)
