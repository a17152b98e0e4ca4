"""Scoring an episode, with OSWorld's semantics:

1. the evaluator's ``postconfig`` steps run first (a failing one raises, like a setup step);
2. ``func: "infeasible"`` scores 1 exactly when the episode's last action was ``FAIL``; any other task scores 0
   when it was (the policy gave up on a feasible task);
3. otherwise each function gets its getters' values, ``metric(result, expected, **options)`` (or
   ``metric(result, **options)`` without an expected getter); with a list of functions, ``conj: "and"`` (the
   default) stops at the first 0 (reward 0) and else averages the scores, ``conj: "or"`` stops at the first 1
   (reward 1) and else takes the best score. Functions after a stop are not evaluated.

A metric that raises (a malformed file the policy wrote, say) scores 0 with the error in its detail. Getters
that cannot reach the sandbox raise: the episode cannot be scored.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sandbox.tasks.errors import TaskError
from sandbox.tasks.getters import get
from sandbox.tasks.metrics import METRICS
from sandbox.tasks.model import Getter, Task
from sandbox.tasks.runtime import EvalContext, Fixtures, TaskRuntime
from sandbox.tasks.setup import run_steps
from sandbox.tasks.values import FileData

log = logging.getLogger(__name__)

SUMMARY_CHARS = 500


class MetricDetail(BaseModel):
    model_config = ConfigDict(frozen=True)

    func: str
    score: float | None = Field(description="The metric's score; None when it was not evaluated (conj stopped).")
    result: Any = Field(None, description="What the result getter returned (files and long text summarized).")
    expected: Any = None
    error: str | None = None


class EvaluationResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    reward: float = Field(ge=0.0, le=1.0)
    details: list[MetricDetail] = Field(default_factory=list)
    conj: Literal["and", "or"] = "and"
    reason: str = ""


async def evaluate(
    task: Task, runtime: TaskRuntime, fixtures: Fixtures, *, last_action: str | None = None, password: str = "password"
) -> EvaluationResult:
    """Score the sandbox's state for ``task``; ``last_action`` is the episode's last action when it was one of
    OSWorld's special ones (``"DONE"``, ``"FAIL"``, ``"WAIT"``), else None."""
    problems = task.problems()
    if problems:
        raise TaskError(f"task {task.id!r} cannot be evaluated here: {'; '.join(problems)}", problems)
    ev = task.evaluator
    await run_steps(ev.postconfig, runtime, fixtures, password=password, where="evaluator.postconfig")
    if task.infeasible:
        reward = 1.0 if last_action == "FAIL" else 0.0
        reason = (
            "the episode ended with FAIL"
            if reward
            else "an infeasible task scores only when the episode ends with FAIL"
        )
        return EvaluationResult(reward=reward, details=[MetricDetail(func="infeasible", score=reward)], reason=reason)
    if last_action == "FAIL":
        return EvaluationResult(reward=0.0, conj=ev.conj, reason="the episode ended with FAIL on a feasible task")

    ctx = EvalContext(runtime, fixtures)
    slots = ev.slots()
    details: list[MetricDetail] = []
    scores: list[float] = []
    stopped: str | None = None
    for func, result_getter, expected_getter, options in slots:
        if stopped is not None:
            details.append(MetricDetail(func=func, score=None, error=stopped))
            continue
        detail = await _score(ctx, func, result_getter, expected_getter, options)
        details.append(detail)
        score = detail.score or 0.0
        scores.append(score)
        if len(slots) > 1 and ev.conj == "and" and score == 0.0:
            stopped = f"not evaluated: {func} scored 0 (conj and)"
        elif len(slots) > 1 and ev.conj == "or" and score == 1.0:
            stopped = f"not evaluated: {func} scored 1 (conj or)"
    if len(slots) == 1:
        reward = scores[0]
    elif ev.conj == "and":
        reward = 0.0 if 0.0 in scores else sum(scores) / len(scores)
    else:
        reward = 1.0 if 1.0 in scores else max(scores)
    return EvaluationResult(reward=_clamp(reward), details=details, conj=ev.conj)


async def _score(
    ctx: EvalContext, func: str, result_getter: Getter | None, expected_getter: Getter | None, options: dict[str, Any]
) -> MetricDetail:
    result = await get(ctx, result_getter.type, result_getter.params) if result_getter is not None else None
    expected = await get(ctx, expected_getter.type, expected_getter.params) if expected_getter is not None else None
    metric = METRICS[func]
    try:
        raw = metric(result, expected, **options) if expected_getter is not None else metric(result, **options)
        score, error = _clamp(float(raw)), None
    except Exception as e:  # the policy's output is arbitrary: a metric failing on it scores 0
        log.info("metric %s failed: %r", func, e)
        score, error = 0.0, f"{type(e).__name__}: {e}"
    return MetricDetail(func=func, score=score, result=_summary(result), expected=_summary(expected), error=error)


def _clamp(value: float) -> float:
    return 0.0 if value != value else min(1.0, max(0.0, value))  # NaN scores 0


def _summary(value: Any) -> Any:
    """Getter values as JSON-friendly, bounded summaries for the details."""
    if isinstance(value, FileData):
        return {"file": value.path, "bytes": len(value.data), "head": value.text[:SUMMARY_CHARS]}
    if isinstance(value, list | tuple):
        return [_summary(v) for v in value[:50]]
    if isinstance(value, dict):
        return {str(k): _summary(v) for k, v in list(value.items())[:50]}
    if isinstance(value, str) and len(value) > SUMMARY_CHARS:
        return value[:SUMMARY_CHARS] + f"... ({len(value)} chars)"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    return value
