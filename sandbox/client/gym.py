"""A gymnasium-style environment over one sandbox, with no gymnasium dependency (duck-typed).

    env = SandboxEnv(client, "terminal", reward_fn=my_reward, max_steps=20)
    obs, info = env.reset()
    obs, reward, terminated, truncated, info = env.step({"type": "exec", "cmd": "ls"})
    env.close()

Observations are :class:`sandbox.models.Observation`; actions are action models or dicts.
The sandbox is created on the first ``reset`` and reset (a fresh one from the same spec) on
each later one. There is no ``action_space``/``observation_space``: the action union and the
observation model are the spaces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sandbox.client._sync import Client, Sandbox
from sandbox.errors import FailedPrecondition
from sandbox.models import Action, Observation, SandboxKind
from sandbox.wire.convert import validate_action

RewardFn = Callable[[Sandbox, Action, Observation], float]
"""``reward_fn(sandbox, action, observation) -> reward``; it may inspect the sandbox (exec, files)."""


class SandboxEnv:
    def __init__(
        self,
        client: Client,
        kind: str = "terminal",
        *,
        spec: Mapping[str, Any] | None = None,
        reward_fn: RewardFn | None = None,
        max_steps: int = 100,
    ) -> None:
        if max_steps < 1:
            raise ValueError("max_steps must be at least 1")
        self.client = client
        self.kind = SandboxKind(kind)
        self.spec = dict(spec or {})
        self.reward_fn = reward_fn
        self.max_steps = max_steps
        self.sandbox: Sandbox | None = None
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start an episode: ``(observation, info)``. ``seed`` and ``options`` are accepted and unused."""
        if self.sandbox is None:
            self.sandbox = self.client.create(self.kind.value, **self.spec)
        else:
            self.sandbox.reset()
        self.steps = 0
        obs = self.sandbox.observe()
        return obs, {"sandbox_id": self.sandbox.id}

    def step(self, action: Action | Mapping[str, Any]) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """``(observation, reward, terminated, truncated, info)``."""
        if self.sandbox is None:
            raise FailedPrecondition("call reset() before step()")
        checked = validate_action(action)
        obs = self.sandbox.step(checked, screenshot=self.kind.has_display)
        self.steps += 1
        if self.reward_fn is not None:
            reward = float(self.reward_fn(self.sandbox, checked, obs))
        else:
            reward = obs.reward if obs.reward is not None else 0.0
        terminated = obs.done
        truncated = not terminated and self.steps >= self.max_steps
        return obs, reward, terminated, truncated, {**obs.info, "sandbox_id": self.sandbox.id, "step": self.steps}

    def close(self) -> None:
        """Delete the sandbox (the client stays open: it is the caller's)."""
        sandbox, self.sandbox = self.sandbox, None
        if sandbox is not None:
            sandbox.close()
