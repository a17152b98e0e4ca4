"""Backpressure on a container engine: how many calls of each kind are in flight at once, and fast failure when the
engine stops answering.

An engine can stall (a dockerd short of memory once answered nothing for 40 minutes). Without a bound, every caller
then holds a worker thread until the client's own timeout and gets a bare deadline error. An ``EngineGate`` sits in
front of every engine call:

* **Bounded by kind.** Calls are ``create``, ``start``, ``commit``, ``remove`` or ``other``; each kind has its own
  maximum in flight (``EngineCallSettings.max``), so a burst of creates cannot hold the slots a removal or a listing
  needs. The rest wait in a FIFO queue per kind. A queued call that gets no slot within ``queue_timeout_s`` fails
  ``Unavailable``, saying how many were ahead of it.
* **The engine's silence.** The gate notes when the engine last answered any call (a result or a refusal; a
  connection lost or a client timeout is no answer). While calls are owed an answer, the silence is the time since
  the later of that answer and the oldest owed call's start. Once it reaches ``stall_s``, new calls and queued ones
  fail at once with ``Unavailable`` ("the engine has not answered for 31 s; 57 calls are waiting; retry later"),
  rather than queueing behind calls that will not come back. A *patient* call (a commit copying a file system, a wait
  for a container's exit) holds its slot but owes no prompt answer: its length says nothing of the engine's health.
* **Pressure, with hysteresis.** ``pressure()`` enters overload when the engine stalls or more than ``high_water``
  calls are queued, and leaves it only once the engine has answered within ``recover_s`` and fewer than ``low_water``
  are queued, so a readiness check built on it does not flap. An engine that owes nothing and whose last call ended
  in an answer counts as answering (a quiet control plane is not an overloaded one).
* **A call once sent runs to its end.** A caller cancelled while its call is in flight stops waiting, but the call
  keeps its slot until it ends (a worker thread cannot be stopped, and the engine goes on working). A caller
  cancelled while queued leaves the queue; one cancelled just as it was handed a slot hands the slot on.

asyncio only: no threads, nothing that blocks. Time comes from an injectable monotonic clock; the gate's own timer
(``expire``) fails queued calls whose time is up, and tests with a clock of their own call ``expire`` themselves.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.errors import Unavailable

T = TypeVar("T")

CallKind = Literal["create", "start", "commit", "remove", "other"]
KINDS: tuple[CallKind, ...] = get_args(CallKind)


class CallLimits(BaseModel):
    """How many engine calls of each kind may be in flight at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    create: int = Field(8, ge=1, description="Container creates (the engine writes a layer and a config for each).")
    start: int = Field(8, ge=1, description="Container starts (network set-up, the runtime's start).")
    commit: int = Field(2, ge=1, description="Snapshots: commits copy a container's file system into an image.")
    remove: int = Field(8, ge=1, description="Removals, kills and stops of containers, networks and images.")
    other: int = Field(32, ge=1, description="Everything else: listings, inspects, logs, the engine's info.")


class EngineCallSettings(BaseModel):
    """Backpressure on the engine (``sandbox.backends.engine_gate``): calls in flight per kind, and when to give up."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max: CallLimits = Field(default_factory=CallLimits, description="Most calls in flight at once, per kind.")
    stall_s: float = Field(
        30.0,
        gt=0,
        description="Seconds the engine may owe an answer without giving any: then new and queued calls fail at once.",
    )
    queue_timeout_s: float = Field(60.0, gt=0, description="Seconds a call may wait for a slot before it fails.")
    high_water: int = Field(256, ge=1, description="More calls queued than this: the engine is reported overloaded.")
    low_water: int = Field(32, ge=0, description="Overload ends only once fewer calls than this are queued.")
    recover_s: float = Field(
        5.0, gt=0, description="Overload ends only once the engine has answered a call within this many seconds."
    )

    @model_validator(mode="after")
    def _waters(self) -> EngineCallSettings:
        if self.low_water >= self.high_water:
            raise ValueError(f"low_water ({self.low_water}) must be below high_water ({self.high_water})")
        return self


@dataclass(frozen=True)
class GateStats:
    """The gate now, for metrics."""

    in_flight: dict[str, int]
    queued: dict[str, int]
    peak_in_flight: dict[str, int]
    """The most calls of each kind ever in flight at once."""
    since_answer_s: float
    """Seconds since the engine last answered any call."""
    silence_s: float
    """Seconds the engine has owed an answer without giving any (0 when it owes none)."""
    overloaded: bool


@dataclass(eq=False)
class _Waiter:
    future: asyncio.Future[None]
    deadline: float


class EngineGate:
    """Bounds the engine calls in flight by kind, queues the rest FIFO, and fails fast when the engine stalls."""

    def __init__(
        self,
        settings: EngineCallSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        no_answer: tuple[type[BaseException], ...] = (TimeoutError, ConnectionError),
    ) -> None:
        """``no_answer``: what a call raises when the engine did not answer it (a connection lost, a client
        timeout); any other end of a call, result or error, is an answer."""
        self.settings = settings or EngineCallSettings()
        self._clock = clock
        self._no_answer = no_answer
        self._limits: dict[str, int] = {kind: getattr(self.settings.max, kind) for kind in KINDS}
        self._in_flight: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._peak: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._queues: dict[str, deque[_Waiter]] = {kind: deque() for kind in KINDS}
        self._owed: dict[int, float] = {}
        """Call number -> when it started, for the calls in flight that owe a prompt answer."""
        self._numbers = itertools.count()
        self._last_answer = clock()
        self._unanswered = False
        """The last call to end got no answer (``no_answer``)."""
        self._overloaded = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    async def run(self, kind: CallKind, call: Callable[[], Awaitable[T]], *, patient: bool = False) -> T:
        """``await call()`` once a slot of ``kind`` is free; ``Unavailable`` when the engine has stalled or no slot
        came within ``queue_timeout_s``. ``patient``: the call may rightly take long (see the module's doc)."""
        await self._admit(kind)
        number = next(self._numbers)
        if not patient:
            self._owed[number] = self._clock()
        try:
            task = asyncio.ensure_future(call())
        except BaseException:
            self._end(kind, number, None)
            raise
        task.add_done_callback(lambda done: self._end(kind, number, done))
        return await asyncio.shield(task)

    def pressure(self) -> str | None:
        """None while the engine keeps up; else why it does not (see the module's doc: with hysteresis)."""
        now = self._update()
        if not self._overloaded:
            return None
        stalled = self._stalled(now)
        if stalled is not None:
            return stalled
        queued = self._queued()
        if queued >= self.settings.low_water:
            high, low = self.settings.high_water, self.settings.low_water
            return f"{queued} engine calls are queued (overloaded above {high}, until fewer than {low})"
        return f"the engine last answered {now - self._last_answer:.0f} s ago; overloaded until it answers again"

    def stats(self) -> GateStats:
        now = self._update()
        return GateStats(
            in_flight=dict(self._in_flight),
            queued={kind: len(queue) for kind, queue in self._queues.items()},
            peak_in_flight=dict(self._peak),
            since_answer_s=now - self._last_answer,
            silence_s=self._silence(now),
            overloaded=self._overloaded,
        )

    def expire(self) -> None:
        """Fail the queued calls whose time is up: every one when the engine has stalled, else those that waited
        ``queue_timeout_s``. The gate's own timer calls this; so may a caller with a clock of its own."""
        self._update()

    def close(self) -> None:
        """Fail every queued call and stop the timer; calls in flight run to their end."""
        for queue in self._queues.values():
            while queue:
                self._fail(queue.popleft(), "the engine gate is closing; retry later")
        self._arm()

    # ------------------------------------------------------------------ admission

    async def _admit(self, kind: CallKind) -> None:
        now = self._clock()
        stalled = self._stalled(now)  # counted before the queued calls it fails leave
        self._update(now)
        if stalled is not None:
            raise Unavailable(f"{stalled}; retry later")
        queue = self._queues[kind]
        if not queue and self._in_flight[kind] < self._limits[kind]:
            self._take(kind)
            return
        waiter = _Waiter(asyncio.get_running_loop().create_future(), now + self.settings.queue_timeout_s)
        queue.append(waiter)
        self._update(now)
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.cancelled():
                if waiter in queue:
                    queue.remove(waiter)
                    self._update()
            elif waiter.future.exception() is None:
                self._release(kind)  # handed a slot as it was cancelled: pass it on
            raise

    def _take(self, kind: str) -> None:
        self._in_flight[kind] += 1
        self._peak[kind] = max(self._peak[kind], self._in_flight[kind])

    def _release(self, kind: str) -> None:
        """A slot of ``kind`` is free: handed to the first queued call, or given back."""
        queue = self._queues[kind]
        while queue:
            waiter = queue.popleft()
            if not waiter.future.done():
                waiter.future.set_result(None)
                return
        self._in_flight[kind] -= 1

    def _end(self, kind: str, number: int, done: asyncio.Future[Any] | None) -> None:
        self._owed.pop(number, None)
        if done is not None and not done.cancelled():
            error = done.exception()  # also marks it retrieved when the caller stopped waiting
            if error is None or not isinstance(error, self._no_answer):
                self._last_answer, self._unanswered = self._clock(), False
            else:
                self._unanswered = True
        self._release(kind)
        self._update()

    # ------------------------------------------------------------------ judging

    def _update(self, now: float | None = None) -> float:
        """Fail what is due, judge the overload, set the timer for the next moment something falls due."""
        now = self._clock() if now is None else now
        stalled = self._stalled(now)
        for kind, queue in self._queues.items():
            if stalled is not None:
                while queue:
                    self._fail(queue.popleft(), f"{stalled}; retry later")
            ahead = 0
            while queue and queue[0].deadline <= now:
                self._fail(
                    queue.popleft(),
                    f"no {kind} slot within {self.settings.queue_timeout_s:g} s: {self._in_flight[kind]} {kind} calls "
                    f"in flight (at most {self._limits[kind]}), {ahead} more queued ahead of this one; retry later",
                )
                ahead += 1
        queued = self._queued()
        if not self._overloaded:
            self._overloaded = stalled is not None or queued > self.settings.high_water
        elif stalled is None and queued < self.settings.low_water and self._answered_recently(now):
            self._overloaded = False
        self._arm(now)
        return now

    def _silent_since(self) -> float | None:
        """Since when the engine has owed an answer without giving any; None when it owes none."""
        return max(self._last_answer, min(self._owed.values())) if self._owed else None

    def _silence(self, now: float) -> float:
        since = self._silent_since()
        return 0.0 if since is None else max(0.0, now - since)

    def _stalled(self, now: float) -> str | None:
        since = self._silent_since()
        if since is None or now < since + self.settings.stall_s:
            return None
        waiting = sum(self._in_flight.values()) + self._queued()
        calls = "1 call is" if waiting == 1 else f"{waiting} calls are"
        return f"the engine has not answered for {now - since:.0f} s; {calls} waiting"

    def _answered_recently(self, now: float) -> bool:
        quiet = not self._owed and not self._unanswered
        return quiet or now - self._last_answer <= self.settings.recover_s

    def _queued(self) -> int:
        return sum(len(queue) for queue in self._queues.values())

    @staticmethod
    def _fail(waiter: _Waiter, message: str) -> None:
        if not waiter.future.done():
            waiter.future.set_exception(Unavailable(message))

    def _arm(self, now: float | None = None) -> None:
        """The timer, at the next moment a queued call falls due (its timeout, or the engine's stall)."""
        heads = [queue[0] for queue in self._queues.values() if queue]
        if not heads:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        now = self._clock() if now is None else now
        due = min(waiter.deadline for waiter in heads)
        since = self._silent_since()
        if since is not None:
            due = min(due, since + self.settings.stall_s)
        if self._timer is not None:
            if self._timer_at <= due:
                return
            self._timer.cancel()
        loop = heads[0].future.get_loop()
        self._timer, self._timer_at = loop.call_later(max(0.0, due - now), self._fire), due

    def _fire(self) -> None:
        self._timer = None
        self._update()
