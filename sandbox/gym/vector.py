"""A vector env of N sandboxes stepped concurrently over one :class:`~sandbox.client.AsyncClient`.

    envs = SandboxVectorEnv("tasks/terminal-sort-names.json", num_envs=8)
    obs, infos = envs.reset(seed=0)
    obs, rewards, terminations, truncations, infos = envs.step(["pyautogui.press('enter')"] * 8)
    envs.close()

No subprocesses and no pickling: the N sandboxes' calls run at once in one event loop (a thread of the env's own),
so a step takes about as long as the slowest sandbox's, not their sum; the sub-envs' actions go in one ``StepMany``
call. ``reset()`` resets one sub-env of each task
first (its first reset runs the setup and snapshots it), then the others at once (they swap that snapshot in).
``gymnasium.make_vec("sandbox/Task-v0", num_envs=8, vectorization_mode="vector_entry_point", task=...)`` makes one
too. Sub-envs whose episode ended are reset on their next step (``AutoresetMode.NEXT_STEP``, gymnasium's default):
that step returns the reset's observation with reward 0. ``tasks`` may list one task per sub-env (all of one kind
and screen).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from sandbox.client import AsyncClient
from sandbox.errors import InvalidArgument
from sandbox.gym import episode
from sandbox.gym.episode import Outcome
from sandbox.gym.spaces import action_space, blank_frame, observation_space, to_gym
from sandbox.tasks.model import Task

T = TypeVar("T")
DEFAULT_TARGET = "127.0.0.1:50051"


class SandboxVectorEnv(VectorEnv[dict[str, Any], Any, np.ndarray]):
    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(
        self,
        task: Task | Mapping[str, Any] | str | None = None,
        *,
        num_envs: int = 1,
        tasks: Sequence[Task | Mapping[str, Any] | str] | None = None,
        target: str = DEFAULT_TARGET,
        token: str | None = None,
        spec: Mapping[str, Any] | None = None,
        render_mode: str | None = None,
        timeout: float = 120,
    ) -> None:
        if (task is None) == (tasks is None):
            raise InvalidArgument("give a task (every sub-env runs it) or tasks (one per sub-env)")
        loaded = [episode.load_task(t) for t in tasks] if tasks is not None else [episode.load_task(task)] * num_envs
        if not loaded:
            raise InvalidArgument("a vector env needs at least one sub-env")
        self.tasks = loaded
        self.num_envs = len(loaded)
        self.kind = loaded[0].sandbox.kind
        self.spec_fields = dict(spec or {})
        self.screen = episode.screen_of(loaded[0], self.kind, self.spec_fields)
        for other in loaded[1:]:
            screen = episode.screen_of(other, self.kind, self.spec_fields)
            if other.sandbox.kind is not self.kind or screen != self.screen:
                raise InvalidArgument(f"task {other.id!r} differs in kind or screen from {loaded[0].id!r}")
        self.single_observation_space = observation_space(self.screen)
        self.single_action_space = action_space()
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be 'rgb_array' or None, not {render_mode!r}")
        self.render_mode = render_mode
        self._client_args = (target, token, timeout)
        self._client: AsyncClient | None = None
        self.sandbox_ids: list[str | None] = [None] * self.num_envs
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._last: list[dict[str, Any] | None] = [None] * self.num_envs
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sandbox-vector-env", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _aclient(self) -> AsyncClient:
        if self._client is None:
            target, token, timeout = self._client_args
            self._client = AsyncClient(target, token=token, timeout=timeout)
        return self._client

    async def _start(self, i: int) -> Outcome:
        client = self._aclient()
        sandbox_id = self.sandbox_ids[i]
        if sandbox_id is None:
            spec = episode.sandbox_spec(self.tasks[i], self.kind, self.screen, self.spec_fields)
            sandbox_id = (await client._run(episode.create(self.kind, spec))).id
            self.sandbox_ids[i] = sandbox_id
        return await client._run(episode.start(sandbox_id, self.tasks[i], display=self.kind.has_display))

    async def _step_all(self, actions: Any) -> list[Outcome]:
        """The sub-envs still in an episode act in one ``StepMany`` call while those whose episode ended are reset;
        then the episodes that ended on this step are scored, all at once."""
        client = self._aclient()
        acting = [i for i in range(self.num_envs) if not self._ended[i]]
        restarting = [i for i in range(self.num_envs) if self._ended[i]]
        steps = [(self._id(i), actions[i]) for i in acting]
        acted, started = await asyncio.gather(
            client._run(episode.act_many(steps, display=self.kind.has_display)),
            self._gather([self._start(i) for i in restarting]),
        )
        outcomes = dict(zip(acting, acted, strict=True)) | dict(zip(restarting, started, strict=True))
        ended = [i for i in acting if episode.ended(outcomes[i])]
        scored = await asyncio.gather(*(client._run(episode.scored(self._id(i), outcomes[i])) for i in ended))
        outcomes.update(zip(ended, scored, strict=True))
        return [outcomes[i] for i in range(self.num_envs)]

    def _id(self, i: int) -> str:
        sandbox_id = self.sandbox_ids[i]
        assert sandbox_id is not None
        return sandbox_id

    async def _gather(self, calls: list[Coroutine[Any, Any, Outcome]]) -> list[Outcome]:
        return list(await asyncio.gather(*calls))

    # ------------------------------------------------------------------ the gymnasium API

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every sub-env to its task, all at once. ``options={"tasks": [...]}`` switches tasks (same kind and
        screen)."""
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seed if isinstance(seed, int) else seed[0])
        if options and options.get("tasks") is not None:
            tasks = [episode.load_task(t) for t in options["tasks"]]
            if len(tasks) != self.num_envs or any(t.sandbox.kind is not self.kind for t in tasks):
                raise InvalidArgument(f"options['tasks'] must list {self.num_envs} {self.kind.value} tasks")
            self.tasks = tasks
        # One sub-env per task first: the first reset to a task runs its setup and snapshots it, and the others
        # then swap that snapshot in rather than all running the same setup at once.
        first_of: dict[str, int] = {}
        for i, task in enumerate(self.tasks):
            first_of.setdefault(task.digest(), i)
        leads = list(first_of.values())
        outcomes = dict(zip(leads, self._call(self._gather([self._start(i) for i in leads])), strict=True))
        rest = [i for i in range(self.num_envs) if i not in outcomes]
        outcomes.update(zip(rest, self._call(self._gather([self._start(i) for i in rest])), strict=True))
        self._ended[:] = False
        return self._batch([outcomes[i] for i in range(self.num_envs)])

    def step(self, actions: Any) -> tuple[dict[str, Any], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per sub-env (a sequence of N), done concurrently; a sub-env whose episode ended is reset
        instead."""
        if len(actions) != self.num_envs:
            raise InvalidArgument(f"step takes {self.num_envs} actions, one per sub-env; got {len(actions)}")
        if any(s is None for s in self.sandbox_ids):
            raise InvalidArgument("call reset() before step()")
        outcomes = self._call(self._step_all(actions))
        rewards = np.array([o.reward for o in outcomes], dtype=np.float64)
        terminations = np.array([o.terminated for o in outcomes], dtype=np.bool_)
        truncations = np.array([o.truncated for o in outcomes], dtype=np.bool_)
        self._ended = terminations | truncations
        obs, infos = self._batch(outcomes)
        return obs, rewards, terminations, truncations, infos

    def render(self) -> tuple[np.ndarray, ...] | None:
        if self.render_mode != "rgb_array" or self.screen is None:
            return None
        frames = [last.get("screenshot") if last else None for last in self._last]
        return tuple(f.copy() if f is not None else blank_frame(self.screen) for f in frames)

    def close_extras(self, **kwargs: Any) -> None:
        """Delete the sandboxes, close the client, stop the loop's thread."""

        async def shut() -> None:
            client = self._client
            if client is None:
                return
            ids = [s for s in self.sandbox_ids if s is not None]
            await asyncio.gather(*(client._run(episode.delete(s)) for s in ids), return_exceptions=True)
            await client.close()

        try:
            self._call(shut())
        finally:
            self.sandbox_ids = [None] * self.num_envs
            self._client = None
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()

    # ------------------------------------------------------------------ batching

    def _batch(self, outcomes: list[Outcome]) -> tuple[dict[str, Any], dict[str, Any]]:
        singles = [to_gym(o.obs, self.screen, text=o.error) for o in outcomes]
        self._last = list(singles)
        out: Any = create_empty_array(self.single_observation_space, self.num_envs)
        obs = concatenate(self.single_observation_space, singles, out)
        infos: dict[str, Any] = {}
        for i, outcome in enumerate(outcomes):
            infos = self._add_info(infos, outcome.info, i)
        return dict(obs), infos
