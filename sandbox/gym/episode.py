"""One env's episode, written once for the sync env and the async vector env: operations in the SDK's sans-I/O
style (:mod:`sandbox.client._ops`) that the :class:`~sandbox.client.Client` or the
:class:`~sandbox.client.AsyncClient` runs.

- ``start``: the sandbox (created on the first reset, with the task's kind, image and screen) reset to the task,
  and the first observation;
- ``act``: one action. An action that is not one (bad JSON, unknown pyautogui) is not done and not counted: the
  step answers with its error (``info["error"]``) and reward 0. When the episode ends (``DONE``, ``FAIL``, the
  task's step or time limit) the task's evaluator scores it: that is the step's reward (0 before).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sandbox import models
from sandbox.client import _episodes, _ops
from sandbox.errors import InvalidArgument, SandboxError
from sandbox.gym.spaces import parse_action
from sandbox.models import Observation, SandboxKind, ScreenSize
from sandbox.tasks.model import Task


@dataclass
class Outcome:
    """What a step or a reset gives back, before conversion to the env's spaces."""

    obs: Observation | None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def sandbox_spec(
    task: Task | None, kind: SandboxKind, screen: ScreenSize | None, spec: Mapping[str, Any]
) -> dict[str, Any]:
    """The spec of the env's sandbox: the caller's, then the task's image, the screen the spaces declare."""
    full: dict[str, Any] = dict(spec)
    if task is not None:
        full.setdefault("labels", {}).setdefault("sandbox.task", task.id[:63])
        if task.sandbox.image is not None:
            full["image"] = task.sandbox.image
    if screen is not None and kind.has_display:
        full["screen"] = screen.model_dump()
    return full


def screen_of(task: Task | None, kind: SandboxKind, spec: Mapping[str, Any]) -> ScreenSize | None:
    """The screen the env observes: the task's, else the spec's, else the platform's default; None without a
    display."""
    if not kind.has_display:
        return None
    if task is not None and task.sandbox.screen is not None:
        return task.sandbox.screen
    if spec.get("screen") is not None:
        return ScreenSize.model_validate(spec["screen"])
    return ScreenSize()


def create(kind: SandboxKind, spec: Mapping[str, Any]) -> _ops.Op[models.SandboxInfo]:
    return _ops.create(kind.value, spec)


def start(sandbox_id: str, task: Task | None, *, display: bool, fresh: bool = False) -> _ops.Op[Outcome]:
    """Reset to ``task`` (its first observation), or, with no task, to a fresh sandbox (unless it is one:
    ``fresh``) and observe it."""
    if task is not None:
        _, obs = yield from _episodes.reset(sandbox_id, task=task)
        assert obs is not None  # a reset to a task always observes
    else:
        if not fresh:
            yield from _episodes.reset(sandbox_id)
        obs = (yield from _ops.observe(sandbox_id, format="png", quality=80)) if display else Observation()
    info = {**obs.info, "sandbox_id": sandbox_id, "timings_ms": dict(obs.timings_ms)}
    return Outcome(obs, info=info)


def act(
    sandbox_id: str, action: str | Mapping[str, Any] | models.Action, *, display: bool, task: bool
) -> _ops.Op[Outcome]:
    """One action of an episode, scored by the task's evaluator when the episode ends (``task``)."""
    try:
        checked = parse_action(action)
        obs = yield from _ops.step(sandbox_id, checked, screenshot=display)
    except InvalidArgument as e:
        return refused(sandbox_id, e)
    outcome = observed(sandbox_id, obs)
    if task and ended(outcome):
        outcome = yield from scored(sandbox_id, outcome)
    return outcome


def act_many(
    steps: Sequence[tuple[str, str | Mapping[str, Any] | models.Action]], *, display: bool
) -> _ops.Op[list[Outcome]]:
    """One action in each of many episodes, in one call (``StepMany``): each outcome as ``act``'s before its
    scoring, which is the caller's (``scored``, for those whose episode ended, all at once). A failure that is not
    the action's own (the sandbox is gone, say) is raised, as ``act`` raises it."""
    outcomes: list[Outcome | None] = [None] * len(steps)
    parsed: list[tuple[int, str, models.Action]] = []
    for i, (sandbox_id, action) in enumerate(steps):
        try:
            parsed.append((i, sandbox_id, parse_action(action)))
        except InvalidArgument as e:
            outcomes[i] = refused(sandbox_id, e)
    answers: list[Observation | SandboxError] = []
    if parsed:
        answers = yield from _ops.step_many([(sandbox_id, a) for _, sandbox_id, a in parsed], screenshot=display)
    for (i, sandbox_id, _), answer in zip(parsed, answers, strict=True):
        if isinstance(answer, InvalidArgument):
            outcomes[i] = refused(sandbox_id, answer)
        elif isinstance(answer, SandboxError):
            raise answer
        else:
            outcomes[i] = observed(sandbox_id, answer)
    return [outcome for outcome in outcomes if outcome is not None]


def refused(sandbox_id: str, error: InvalidArgument) -> Outcome:
    """An action that is not one: not done, not counted; its error is the step's answer."""
    return Outcome(None, error=error.message, info={"sandbox_id": sandbox_id, "error": error.message})


def observed(sandbox_id: str, obs: Observation) -> Outcome:
    info: dict[str, Any] = {**obs.info, "sandbox_id": sandbox_id, "timings_ms": dict(obs.timings_ms)}
    truncated = bool(obs.info.get("truncated"))
    return Outcome(obs, terminated=obs.done and not truncated, truncated=truncated, info=info)


def ended(outcome: Outcome) -> bool:
    """Whether the step ended its episode (``DONE``, ``FAIL``, a limit): the evaluator's turn."""
    return outcome.obs is not None and outcome.obs.done


def scored(sandbox_id: str, outcome: Outcome) -> _ops.Op[Outcome]:
    """``outcome`` of an episode that ended, with the task's evaluator's reward."""
    reward = yield from _episodes.evaluate(sandbox_id)
    return replace(outcome, reward=reward, info={**outcome.info, "reward": reward})


def delete(sandbox_id: str) -> _ops.Op[None]:
    return _ops.delete(sandbox_id, missing_ok=True)


def load_task(task: Task | Mapping[str, Any] | str | Any) -> Task:
    """A task from a ``Task``, its dict, or its file's path."""
    return _episodes._load(task)
