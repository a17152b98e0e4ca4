"""The gymnasium envs: :class:`SandboxTaskEnv` (an episode of a task, scored by its evaluator) and
:class:`SandboxEnv` (a sandbox of a kind, with your reward function).

Each env holds one sandbox, created on the first ``reset`` and reused: later resets swap in the task's post-setup
snapshot (milliseconds once the first reset has made it). ``close()`` deletes the sandbox. Spaces: see
:mod:`sandbox.gym.spaces`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium
import numpy as np

from sandbox.client import Client, Sandbox
from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.gym import episode
from sandbox.gym.episode import Outcome
from sandbox.gym.spaces import action_space, blank_frame, observation_space, render_text, to_gym
from sandbox.models import Action, Observation, SandboxKind
from sandbox.tasks.model import Task

DEFAULT_TARGET = "127.0.0.1:50051"
RewardFn = Callable[[Sandbox, Action, Observation], float]
"""``reward_fn(sandbox, action, observation) -> reward`` of :class:`SandboxEnv`; it may inspect the sandbox."""


class SandboxEnv(gymnasium.Env[dict[str, Any], str]):
    """A sandbox of ``kind`` as an env: ``reset`` gives a fresh sandbox of the spec, ``step`` does one action and
    scores it with ``reward_fn`` (0 without one); the episode is cut (truncated) after ``max_steps``.

    Connects to ``target`` with ``token``, or uses ``client`` (which it does not close). Pass target and token,
    not a client, through ``gymnasium.make``: it deep-copies its arguments."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self,
        kind: str = "terminal",
        *,
        target: str = DEFAULT_TARGET,
        token: str | None = None,
        client: Client | None = None,
        spec: Mapping[str, Any] | None = None,
        reward_fn: RewardFn | None = None,
        max_steps: int = 100,
        render_mode: str | None = None,
        timeout: float = 120,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self._setup(SandboxKind(kind), None, target, token, client, spec, render_mode, timeout)
        self.reward_fn = reward_fn
        self.max_steps = max_steps
        self.steps = 0

    def _setup(
        self,
        kind: SandboxKind,
        task: Task | None,
        target: str,
        token: str | None,
        client: Client | None,
        spec: Mapping[str, Any] | None,
        render_mode: str | None,
        timeout: float,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, not {render_mode!r}")
        self.kind = kind
        self.task = task
        self.spec_fields = dict(spec or {})
        self.screen = episode.screen_of(task, kind, self.spec_fields)
        self.observation_space = observation_space(self.screen)
        self.action_space = action_space()
        self.render_mode = render_mode
        self.target, self._token, self._timeout = target, token, timeout
        self._client = client
        self._own_client = client is None
        self.sandbox: Sandbox | None = None
        """The env's sandbox (created on the first reset): exec, files, observe it as you like."""
        self._last: dict[str, Any] | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.target, token=self._token, timeout=self._timeout)
        return self._client

    # ------------------------------------------------------------------ the gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode: ``(observation, info)``. The seed seeds ``np_random`` (the sandbox is what it is)."""
        super().reset(seed=seed)
        self._switch_task(options)
        fresh = self.sandbox is None
        if self.sandbox is None:
            spec = episode.sandbox_spec(self.task, self.kind, self.screen, self.spec_fields)
            self.sandbox = Sandbox(self.client, self.client._run(episode.create(self.kind, spec)))
        display = self.kind.has_display
        outcome = self.client._run(episode.start(self.sandbox.id, self.task, display=display, fresh=fresh))
        self.steps = 0
        return self._emit(outcome), outcome.info

    def step(
        self, action: str | Mapping[str, Any] | Action
    ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Do one action: ``(observation, reward, terminated, truncated, info)``."""
        if self.sandbox is None:
            raise FailedPrecondition("call reset() before step()")
        outcome = self.client._run(
            episode.act(self.sandbox.id, action, display=self.kind.has_display, task=self.task is not None)
        )
        outcome = self._score(action, outcome)
        return self._emit(outcome), float(outcome.reward), outcome.terminated, outcome.truncated, outcome.info

    def render(self) -> np.ndarray | None:
        """``rgb_array``: the last screen (a display kind) or the last output drawn as a terminal."""
        if self.render_mode != "rgb_array":
            return None
        last = self._last or {}
        if self.screen is not None:
            frame = last.get("screenshot")
            return frame.copy() if frame is not None else blank_frame(self.screen)
        return render_text(str(last.get("text", "")))

    def close(self) -> None:
        """Delete the sandbox; close the client if the env made it. Idempotent."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            self.client._run(episode.delete(sandbox.id))
        if self._own_client and self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ parts

    def _switch_task(self, options: Mapping[str, Any] | None) -> None:
        if options and options.get("task") is not None:
            raise InvalidArgument("this env has no task: use SandboxTaskEnv for tasks")

    def _score(self, action: str | Mapping[str, Any] | Action, outcome: Outcome) -> Outcome:
        if outcome.error is not None:
            return outcome
        self.steps += 1
        if self.reward_fn is not None and outcome.obs is not None and self.sandbox is not None:
            outcome.reward = float(self.reward_fn(self.sandbox, episode.parse_action(action), outcome.obs))
        outcome.info["step"] = self.steps
        if not outcome.terminated and self.steps >= self.max_steps:
            outcome.truncated = True
        return outcome

    def _emit(self, outcome: Outcome) -> dict[str, Any]:
        obs = to_gym(outcome.obs, self.screen, text=outcome.error)
        self._last = obs
        return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in obs.items()}


class SandboxTaskEnv(SandboxEnv):
    """An episode of ``task`` (a :class:`~sandbox.tasks.Task`, its dict, or its JSON file's path) per reset, in a
    sandbox of the task's kind. The reward is the task evaluator's score when the episode ends (0 before);
    ``terminated`` on ``DONE``/``FAIL``, ``truncated`` at the task's step or time limit.

    ``reset(options={"task": other})`` switches to another task of the same kind and screen."""

    def __init__(
        self,
        task: Task | Mapping[str, Any] | str,
        *,
        target: str = DEFAULT_TARGET,
        token: str | None = None,
        client: Client | None = None,
        spec: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        timeout: float = 120,
    ) -> None:
        loaded = episode.load_task(task)
        self._setup(loaded.sandbox.kind, loaded, target, token, client, spec, render_mode, timeout)
        self.reward_fn = None
        self.max_steps = loaded.limits.max_steps
        self.steps = 0

    def _switch_task(self, options: Mapping[str, Any] | None) -> None:
        if not options or options.get("task") is None:
            return
        task = episode.load_task(options["task"])
        if task.sandbox.kind is not self.kind or episode.screen_of(task, self.kind, self.spec_fields) != self.screen:
            raise InvalidArgument(
                f"task {task.id!r} needs a {task.sandbox.kind.value} sandbox with another screen than this env's "
                f"spaces: make another env for it"
            )
        if task.sandbox.image != (self.task.sandbox.image if self.task else None):
            self.close_sandbox()
        self.task = task

    def close_sandbox(self) -> None:
        """Delete the sandbox (the next reset makes another); the client stays."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            self.client._run(episode.delete(sandbox.id))

    def _score(self, action: str | Mapping[str, Any] | Action, outcome: Outcome) -> Outcome:
        return outcome  # the server counts the steps and ends the episode; the evaluator scored it
