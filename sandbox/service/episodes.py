"""Episodes: a sandbox reset to a task, stepped by a policy, and scored.

    reset(task=...)   the task's post-setup state, and the first observation. The first time: the task's image, its
                      setup run, and the files the setup made snapshotted (``task-<digest[:16]>``, ``warm`` replicas
                      kept): by one of the resets that begin together, the others only set up (``task_snapshots``).
                      Later: a warm replica of that snapshot swapped in. A snapshot keeps no memory, so the
                      setup steps from the first one on live programs (launch, open, windows, tabs) run after the
                      swap too (``split_setup``). A backend that cannot snapshot runs the whole setup every time.
                      Snapshots nobody used lately are removed by the leader (``task_snapshots``).
    step(action)      counted; the episode ends on DONE or FAIL, at the step limit or the time limit (truncated);
                      a step after the end is refused until the next reset. The step is the facade's
                      (``SandboxService.step``): it asks ``advance`` here in an episode, else ``primitives`` what the
                      action does and ``Acting.act`` to do it.
    evaluate()        the task's evaluator: the reward in [0, 1], kept on the episode

The episode lives on the sandbox's record in the store (``SandboxRecord.episode``), written by compare-and-set, so
any replica serves the next step; the task (and the fixtures it came with) is kept in the store for the evaluation
(``task_store``). Every step is recorded to the trajectory store (``trajectory_ops``), and, asked for
(``record_screen``, android), the screen: started at the reset, kept at the episode's end.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from typing import Any

from sandbox.errors import FailedPrecondition, InvalidArgument, Unavailable
from sandbox.models import (
    OSWORLD_WAIT_S,
    Action,
    Done,
    Fail,
    Observation,
    Pyautogui,
    SandboxInfo,
    SandboxKind,
    SandboxSpec,
    Wait,
)
from sandbox.observability.metrics import Metrics
from sandbox.service.acting import Acting
from sandbox.service.auth import Principal
from sandbox.service.core import Records, _ids, ms_since, timed
from sandbox.service.failures import Failures
from sandbox.service.leases import Leases
from sandbox.service.provisioning import Provisioner
from sandbox.service.records import EpisodeRecord, SandboxRecord
from sandbox.service.task_config import (
    MAX_SENT_FIXTURE_BYTES,
    SentFixtures,
    TaskSettings,
    load_task,
    task_snapshot_name,
)
from sandbox.service.task_runtime import AgentRuntime
from sandbox.service.task_snapshots import TaskSnapshots
from sandbox.service.task_store import keep_task, kept_task
from sandbox.service.trajectory_ops import Recorder
from sandbox.store import Store
from sandbox.tasks.model import SetupStep, Task, TaskError
from sandbox.tasks.runtime import Fixtures
from sandbox.tasks.setup import run_steps


class Episodes:
    def __init__(
        self,
        *,
        store: Store,
        records: Records,
        provisioner: Provisioner,
        leases: Leases,
        acting: Acting,
        failures: Failures,
        recorder: Recorder,
        task_snapshots: TaskSnapshots,
        settings: TaskSettings,
        metrics: Metrics,
        logger: logging.Logger,
    ) -> None:
        self.store = store
        self.records = records
        self.provisioner = provisioner
        self.leases = leases
        self.acting = acting
        self.failures = failures
        self.recorder = recorder
        self.task_snapshots = task_snapshots
        self.settings = settings
        """The ``tasks`` server settings: the fixtures, the sandbox user's password."""
        self.metrics = metrics
        self._log = logger
        self.fixtures = settings.fixtures()
        self.setups_run = 0
        """Task setups this replica ran up to their snapshot (a reset that swapped the snapshot in runs none)."""
        self.task_snapshots_taken = 0
        """Task snapshots this replica took (the first reset rule: one per task, across replicas)."""

    def load_task(self, data: Any, *, fixtures: Mapping[str, bytes] | None = None) -> Task:
        """A task from a request (its JSON text, or the object), with the files the client sent for its downloads;
        ``InvalidArgument`` (``TaskError``) listing every reason it cannot run here."""
        return load_task(data, self.task_fixtures(fixtures))

    def task_fixtures(self, sent: Mapping[str, bytes] | None = None) -> Fixtures:
        """The fixtures a task's downloads resolve through: the server's, and what the client sent."""
        if not sent:
            return self.fixtures
        if sum(len(v) for v in sent.values()) > MAX_SENT_FIXTURE_BYTES:
            raise InvalidArgument(
                f"the fixtures sent with a task may total {MAX_SENT_FIXTURE_BYTES >> 20} MiB; put larger ones in the "
                "server's tasks.fixtures_dir"
            )
        return SentFixtures(self.fixtures, sent)

    # ------------------------------------------------------------------ reset

    async def reset_to_task(
        self, principal: Principal, sandbox_id: str, task: Task, *, record_screen: bool = False
    ) -> tuple[SandboxInfo, Observation]:
        """Start an episode of ``task``: its post-setup state (a warm instance of its snapshot when there is one,
        else its setup run and snapshotted for the next time) and the first observation. ``record_screen``: the
        episode's screen recorded into its trajectory (android only; see ``trajectory_ops``)."""
        with self.metrics.operation("reset"):
            return await self._reset_to_task(principal, sandbox_id, task, record_screen)

    async def _reset_to_task(
        self, principal: Principal, sandbox_id: str, task: Task, record_screen: bool
    ) -> tuple[SandboxInfo, Observation]:
        started = time.perf_counter()
        problems = task.problems()
        if problems:
            raise TaskError(f"task {task.id!r} cannot run here: {'; '.join(problems)}", problems)
        record = await self.records.find(principal, sandbox_id)
        if task.sandbox.kind is not record.spec.kind:
            raise FailedPrecondition(
                f"task {task.id!r} runs in a {task.sandbox.kind.value} sandbox; {sandbox_id} is "
                f"{record.spec.kind.value}: create a {task.sandbox.kind.value} sandbox for it"
            )
        if record_screen:
            self.recorder.check_recording(record)
        fixtures = task.fixtures or self.fixtures
        kept, live = split_setup(task)
        digest = task.digest(fixtures)
        task_hash = await keep_task(self.store, principal.tenant, task, fixtures, self.fixtures)
        base = _task_spec(record.spec, task)
        # The snapshot keeps the state the steps up to the first on live programs made (files, not memory).
        name = task_snapshot_name(task.model_copy(update={"config": kept}).digest(fixtures)) if kept else None
        episode = EpisodeRecord(
            task_id=task.id,
            digest=digest,
            task_hash=task_hash,
            trajectory_id=f"tr-{secrets.token_hex(8)}",
            started_at=time.time(),
            max_steps=task.limits.max_steps,
            max_seconds=task.limits.max_seconds,
        )
        timings: dict[str, float] = {}
        before = record
        await self.recorder.end_recording(before)  # before the emulator's reset loses it
        swapped = name is not None and await self.task_snapshots.mark_used(principal.tenant, name)
        lock = None
        try:
            if name is not None and not swapped:  # the first reset rule: see task_snapshots
                lock = await self.task_snapshots.lock(principal.tenant, name, record)
                # Under the lock, look again: one taken under a lock released since the first look is swapped in.
                swapped = lock is not None and await self.task_snapshots.mark_used(principal.tenant, name)
            updated = await self.leases.reset_onto(
                principal, sandbox_id, base.model_copy(update={"snapshot": name}) if swapped else base
            )
            timings["swap"] = ms_since(started)
            setup_started = time.perf_counter()
            ran = 0 if swapped else len(kept)
            if not swapped and kept:
                self.setups_run += 1
                await self._run_steps(updated, kept, fixtures, where="config")
                if lock is not None and name is not None:  # else another reset takes it, or none can be taken
                    self.task_snapshots_taken += await self.task_snapshots.snapshot_task(
                        principal.tenant, updated, name, lock
                    )
        finally:
            if lock is not None:
                await lock.release()
        if live:
            await self._run_steps(updated, live, fixtures, where=f"config[{len(kept)}:]")
            ran += len(live)
        if ran:
            timings["setup"] = ms_since(setup_started)
        episode = episode.model_copy(update={"started_at": time.time()})  # the clock starts when the agent can act
        since, warnings = await self.recorder.start_recording(updated) if record_screen else (None, [])
        episode = episode.model_copy(update={"recording_since": since})
        updated = await self._begin(updated, episode)
        await self.abandon(before)
        obs = await self._first_observation(updated)
        image = await self.provisioner.image(principal, updated.spec)
        await self.recorder.start_trajectory(updated, episode, image, warnings=warnings)
        info = {**episode.summary(), "setup_ran": ran > 0, "setup_steps": ran, "snapshot": name if swapped else None}
        if record_screen:
            info["recording"] = since is not None
        obs = obs.model_copy(
            update={"info": info, "timings_ms": {**timings, **obs.timings_ms, "total": ms_since(started)}}
        )
        await self.recorder.record_step(updated, episode, 0, None, obs)
        self._log.info(
            "sandbox %s reset to task %s (%s, %d setup steps run, %.0f ms)",
            sandbox_id,
            task.id,
            f"snapshot {name} swapped in" if swapped else "from its image",
            ran,
            obs.timings_ms["total"],
            extra=_ids(updated),
        )
        return updated.info(), obs

    async def _run_steps(
        self, record: SandboxRecord, steps: list[SetupStep], fixtures: Fixtures, *, where: str
    ) -> None:
        runtime = AgentRuntime(self.records.agent(record), record.spec)
        try:
            await run_steps(steps, runtime, fixtures, password=self.settings.password, where=where)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e

    async def _begin(self, record: SandboxRecord, episode: EpisodeRecord) -> SandboxRecord:
        """Write ``episode`` onto the record, if the instance ``record`` names still serves the sandbox."""
        instance = record.instance

        def begin(fresh: SandboxRecord) -> bool:
            if fresh.instance != instance:
                return False
            fresh.episode = episode
            return True

        updated = await self.records.update(record.id, begin)
        if updated is None:
            raise Unavailable(f"sandbox {record.id} was reset or recovered while its task was set up; reset it again")
        return updated

    async def abandon(self, record: SandboxRecord) -> None:
        """A reset replaced the episode ``record`` ran: its trajectory ends there, unfinished."""
        episode = record.episode
        if episode is not None and not episode.done:
            await self.recorder.note_trajectory(record, episode, {"ended_at": time.time(), "reason": "reset"})

    async def _first_observation(self, record: SandboxRecord) -> Observation:
        agent = self.records.agent(record)
        obs: dict[str, Any] = {}
        shot_started = time.perf_counter()
        try:
            if record.spec.kind.has_display:
                obs["screenshot"] = await agent.screenshot()
            if record.spec.kind is SandboxKind.BROWSER:
                page = await agent.browser_info()
                obs.update(url=page.get("url"), title=page.get("title"))
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        return Observation(**obs, timings_ms={"observe": ms_since(shot_started)})

    # ------------------------------------------------------------------ step

    def primitives(self, record: SandboxRecord, action: Action) -> list[Action]:
        """What ``action`` does in a sandbox that runs no episode, as primitive actions (pyautogui code translated);
        DONE and FAIL are refused, having no episode to end."""
        if isinstance(action, Done | Fail):
            raise FailedPrecondition(
                f"{action.type} ends an episode, and sandbox {record.id} runs none: reset it to a task first"
            )
        primitives, _ = self._plan(record, action)
        return primitives

    async def advance(
        self, record: SandboxRecord, episode: EpisodeRecord, action: Action, *, screenshot: bool
    ) -> Observation:
        """One step of the episode ``record`` runs: done (``Acting.act``), counted, recorded, and the episode's end
        reported (``done``, ``info``); refused once the episode has ended."""
        if episode.done:
            raise FailedPrecondition(
                f"the episode of task {episode.task_id!r} on sandbox {record.id} ended ({episode.reason}); "
                "reset the sandbox to a task to start another"
            )
        return await self._episode_step(record, episode, action, screenshot=screenshot)

    def _plan(self, record: SandboxRecord, action: Action) -> tuple[list[Action], str | None]:
        """What ``action`` does, as primitive actions (pyautogui code translated), and ``"DONE"`` or ``"FAIL"``
        when it ends the episode."""
        if isinstance(action, Done):
            return [], "DONE"
        if isinstance(action, Fail):
            return [], "FAIL"
        if isinstance(action, Pyautogui):
            from sandbox.tasks.pyautogui import translate

            translated = translate(action.code, screen=(record.spec.screen.width, record.spec.screen.height))
            if translated == "WAIT":
                return [Wait(seconds=OSWORLD_WAIT_S)], None
            if isinstance(translated, str):
                return [], translated
            return list(translated), None
        return [action], None

    async def _episode_step(
        self, record: SandboxRecord, episode: EpisodeRecord, action: Action, *, screenshot: bool
    ) -> Observation:
        started = time.time()
        primitives, ending = self._plan(record, action)
        over_time = episode.max_seconds is not None and started - episode.started_at >= episode.max_seconds
        if over_time:  # the time ran out before this action: it is not done
            primitives, ending = [], None
        obs = await self.acting.act(record, primitives, screenshot=screenshot, shown=action)
        last = ending or _last_action(action)
        trajectory = episode.trajectory_id

        def advance(fresh: SandboxRecord) -> bool:
            current = fresh.episode
            if current is None or current.trajectory_id != trajectory or current.done:
                return False
            current.steps += 0 if over_time else 1
            current.last_action = current.last_action if over_time else last
            now = time.time()
            if over_time:
                current.done, current.truncated, current.reason = True, True, "time_limit"
            elif ending is not None:
                current.done, current.reason = True, ending.lower()
            elif current.max_steps is not None and current.steps >= current.max_steps:
                current.done, current.truncated, current.reason = True, True, "step_limit"
            elif current.max_seconds is not None and now - current.started_at >= current.max_seconds:
                current.done, current.truncated, current.reason = True, True, "time_limit"
            if current.done:
                current.ended_at = now
            return True

        updated = await self.records.update(record.id, advance, durable=ending is not None or over_time)
        if updated is None or updated.episode is None:
            raise FailedPrecondition(
                f"the episode of task {episode.task_id!r} on sandbox {record.id} ended or was replaced while this "
                "step ran; reset the sandbox to a task to start another"
            )
        now_episode = updated.episode
        obs = obs.model_copy(update={"done": now_episode.done, "info": now_episode.summary()})
        changes: dict[str, Any] = {"steps": now_episode.steps}
        if now_episode.done:
            changes.update(
                done=True, truncated=now_episode.truncated, reason=now_episode.reason, ended_at=now_episode.ended_at
            )
        await self.recorder.record_step(updated, now_episode, now_episode.steps, action, obs, changes=changes)
        await self.recorder.recording_after_step(updated, now_episode)
        return obs

    # ------------------------------------------------------------------ evaluate

    @timed("evaluate")
    async def evaluate(self, principal: Principal, sandbox_id: str) -> float:
        """Score the sandbox's episode with its task's evaluator: the reward in [0, 1], kept on the episode."""
        record = await self.records.find(principal, sandbox_id)
        episode = record.episode
        if episode is None:
            raise FailedPrecondition(f"sandbox {sandbox_id} runs no episode: reset it to a task, then evaluate")
        task = await kept_task(self.store, record.tenant, episode.task_hash, self.fixtures)
        if task is None:
            raise FailedPrecondition(f"the task of sandbox {sandbox_id}'s episode is gone; reset it to the task again")
        from sandbox.tasks.evaluate import evaluate as evaluate_task

        runtime = AgentRuntime(self.records.agent(record), record.spec)
        try:
            last = episode.last_action if episode.last_action in ("DONE", "FAIL", "WAIT") else None
            result = await evaluate_task(
                task, runtime, task.fixtures or self.fixtures, last_action=last, password=self.settings.password
            )
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        reward = min(1.0, max(0.0, float(result.reward)))
        trajectory = episode.trajectory_id

        def score(fresh: SandboxRecord) -> bool:
            if fresh.episode is None or fresh.episode.trajectory_id != trajectory:
                return False
            fresh.episode.reward = reward
            return True

        await self.records.update(record.id, score)
        await self.recorder.note_trajectory(record, episode, {"reward": reward})
        self._log.info(
            "sandbox %s: task %s scored %g%s",
            sandbox_id,
            episode.task_id,
            reward,
            f" ({result.reason})" if result.reason else "",
            extra=_ids(record),
        )
        return reward


def _task_spec(spec: SandboxSpec, task: Task) -> SandboxSpec:
    """The sandbox's spec for ``task``: the task's image and screen (else the sandbox's), no snapshot."""
    update: dict[str, Any] = {"snapshot": None}
    if task.sandbox.image is not None:
        update["image"] = task.sandbox.image
    if task.sandbox.screen is not None:
        update["screen"] = task.sandbox.screen
    return spec.model_copy(update=update)


def _last_action(action: Action) -> str:
    if isinstance(action, Pyautogui):
        return action.code.strip() if action.code.strip() in ("DONE", "FAIL", "WAIT") else "pyautogui"
    if isinstance(action, Wait):
        return "WAIT"
    return action.type


KEPT_BY_A_SNAPSHOT = frozenset({"execute", "command", "download", "sleep"})
"""Setup steps whose effects a snapshot keeps: files. Memory it does not keep: the programs a step starts or acts on
(launch, open, windows, browser tabs) are lost, so the steps from the first such one run again on every reset."""


def split_setup(task: Task) -> tuple[list[SetupStep], list[SetupStep]]:
    """The task's setup steps a snapshot of their result stands for, and those that run on every reset. On android
    every step does (``adb`` acts on the running emulator, whose state a snapshot of the container does not keep)."""
    if task.sandbox.kind is SandboxKind.ANDROID:
        return [], list(task.config)
    for index, step in enumerate(task.config):
        if step.type not in KEPT_BY_A_SNAPSHOT:
            return list(task.config[:index]), list(task.config[index:])
    return list(task.config), []
