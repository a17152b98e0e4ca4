"""Direct lanes (docs/lanes.md): an SDK steps a sandbox through its agent, with the control plane out of the path.

The control plane opens a lane as it serves any call: it finds the caller's sandbox (tenancy), refuses while an
episode runs (an episode's steps are counted, recorded and scored here, so they never take a lane), and grants the
agent a fresh ticket's digest for ``LANE_TTL_S``. The SDK then speaks the agent's own protocol on the lane. The agent
notes every lane step in a ledger that this part reads every ``COLLECT_EVERY_S`` while a lane is open, and merges
into what a step through the control plane leaves: the step's metric, the recent actions, the command output's tail
and the idle clock. A reset, a delete or an episode's start reads the ledger a last time and revokes the lanes.

Lanes live in the replica that granted them (as the recent actions and output tails do): its collector reads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.backends.base import Backend
from sandbox.errors import FailedPrecondition, InvalidArgument, SandboxError, Unavailable
from sandbox.models import COMPUTER_ACTIONS, ExecResult, LaneInfo, SandboxKind, SandboxState
from sandbox.models.android import ANDROID_ACTIONS, ANDROID_REFUSED
from sandbox.observability.metrics import Metrics
from sandbox.service.acting import Acting
from sandbox.service.activity import Activity
from sandbox.service.auth import Principal
from sandbox.service.core import Records, timed
from sandbox.service.failures import Failures
from sandbox.service.records import SandboxRecord
from sandbox.tasks.actions import parse_action

LANE_TTL_S = 600.0
"""How long a lane's ticket holds; the SDK opens a new lane when it expires."""
COLLECT_EVERY_S = 1.0
"""How often the ledgers of busy lanes are read (what metrics and the idle clock lag by)."""
IDLE_EVERY_S = 5.0
"""How often a lane whose last read found no step is read: a lane held but not used costs little."""
LEDGER_DEADLINE_S = 5.0


def lane_actions(kind: SandboxKind) -> list[str]:
    """The action types a lane of a ``kind`` sandbox carries: commands, and the computer's (and android's) actions
    that need no decision of the control plane. Pages, navigation, pyautogui and done/fail go through it."""
    types = ["exec"]
    if kind.has_display:
        types += [a.model_fields["type"].default for a in COMPUTER_ACTIONS]
    if kind is SandboxKind.ANDROID:
        types = [t for t in types if t not in ANDROID_REFUSED]
        types += [a.model_fields["type"].default for a in ANDROID_ACTIONS]
    return types


@dataclass
class _Open:
    instance: str
    kind: SandboxKind
    seen: int = 0
    """The ledger's last step merged."""
    next_read: float = 0.0
    """time.monotonic() from which the collector reads the ledger again."""
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One read at a time (the collector's and a reset's last one must not merge the same steps twice)."""


class Lanes:
    def __init__(
        self,
        *,
        backend: Backend,
        records: Records,
        failures: Failures,
        acting: Acting,
        activity: Activity,
        metrics: Metrics,
        logger: logging.Logger,
    ) -> None:
        self.backend = backend
        self.records = records
        self.failures = failures
        self.acting = acting
        self.activity = activity
        self.metrics = metrics
        self._log = logger
        self._open: dict[str, _Open] = {}
        self._collector: asyncio.Task[None] | None = None

    @timed("open_lane")
    async def open_lane(self, principal: Principal, sandbox_id: str) -> LaneInfo:
        record = await self.records.find(principal, sandbox_id)
        if record.episode is not None:
            raise FailedPrecondition(
                f"sandbox {record.id} runs an episode: its steps go through the control plane, which counts, records "
                "and scores them (open a lane after a plain reset)"
            )
        if record.state is not SandboxState.RUNNING:
            raise FailedPrecondition(f"sandbox {record.id} is {record.state.value}: no lane opens to it")
        address = await self.backend.lane_address(record.instance)
        if address is None:
            raise FailedPrecondition(f"the {self.backend.name} backend offers no direct lane: step through the API")
        ticket = secrets.token_urlsafe(32)
        actions = lane_actions(record.spec.kind)
        grant = {"digest": hashlib.sha256(ticket.encode()).hexdigest(), "ttl_s": LANE_TTL_S, "actions": actions}
        try:
            await self.records.agent(record).request("lane_grant", grant, deadline=LEDGER_DEADLINE_S)
        except Unavailable as e:
            raise await self.failures.dead(record, e) from e
        except InvalidArgument as e:  # an agent of an image built before lanes: "unknown op"
            raise FailedPrecondition(f"the agent of sandbox {record.id} opens no lane ({e.message})") from e
        opened = self._open.get(record.id)
        if opened is None or opened.instance != record.instance:
            self._open[record.id] = _Open(record.instance, record.spec.kind)
        else:
            opened.next_read = 0.0  # a lane about to be used: read it every second again
        if self._collector is None or self._collector.done():
            self._collector = asyncio.create_task(self._collect_while_open(), name="lane-ledgers")
        return LaneInfo(
            sandbox_id=record.id, address=address, ticket=ticket, expires_at=time.time() + LANE_TTL_S, actions=actions
        )

    def has_lanes(self, sandbox_id: str) -> bool:
        """Whether this replica opened a lane to the sandbox that may still be open."""
        return sandbox_id in self._open

    async def close_lanes(self, record: SandboxRecord) -> None:
        """Before a reset, a delete or an episode's start: read the ledger a last time, then revoke every lane."""
        opened = self._open.pop(record.id, None)
        if opened is None or opened.instance != record.instance:
            return
        agent = self.backend.agent(opened.instance)
        with contextlib.suppress(SandboxError):
            await self._read_ledger(record, opened)
        with contextlib.suppress(SandboxError):  # an agent gone takes its lanes with it
            await agent.request("lane_revoke", deadline=LEDGER_DEADLINE_S)

    async def collect(self, *, every: bool = True) -> None:
        """Read every open lane's ledger once; ``every=False``: only those due (the collector, every
        ``COLLECT_EVERY_S``: a lane whose last read found nothing is due ``IDLE_EVERY_S`` later)."""
        now = time.monotonic()
        due = [(i, opened) for i, opened in list(self._open.items()) if every or opened.next_read <= now]
        await asyncio.gather(*(self._collect(sandbox_id, opened) for sandbox_id, opened in due))

    async def stop(self) -> None:
        """Stop reading ledgers (the service is closing); lanes stay granted until they expire."""
        if self._collector is not None:
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
            self._collector = None

    async def _collect_while_open(self) -> None:
        while self._open:
            await asyncio.sleep(COLLECT_EVERY_S)
            try:
                await self.collect(every=False)
            except Exception:  # a bug here must not end the collection of every other lane
                self._log.exception("reading the lanes' ledgers failed")

    async def _collect(self, sandbox_id: str, opened: _Open) -> None:
        record = await self.records.read(sandbox_id)
        if record is None or record.instance != opened.instance or record.state is not SandboxState.RUNNING:
            if self._open.get(sandbox_id) is opened:  # its instance is gone, and its lanes with it
                del self._open[sandbox_id]
            return
        try:
            await self._read_ledger(record, opened)
        except SandboxError as e:  # the health round finds a dead agent; the ledger is read next time
            self._log.debug("cannot read the lane ledger of %s: %s", sandbox_id, e)

    async def _read_ledger(self, record: SandboxRecord, opened: _Open) -> None:
        async with opened.reading:
            await self._read_ledger_once(record, opened)

    async def _read_ledger_once(self, record: SandboxRecord, opened: _Open) -> None:
        agent = self.backend.agent(opened.instance)
        report, _ = await agent.request("lane_report", {"after": opened.seen}, deadline=LEDGER_DEADLINE_S)
        seq = int(report.get("seq", 0))
        if seq < opened.seen:  # the agent started again: its ledger (and its lanes) are new
            opened.seen = 0
            return
        if dropped := int(report.get("dropped", 0)):
            self.metrics.lane_steps_lost.labels(opened.kind.value).inc(dropped)
        steps: list[dict[str, Any]] = report.get("steps") or []
        opened.next_read = time.monotonic() + (COLLECT_EVERY_S if steps else IDLE_EVERY_S) - 0.05
        last_at = self._merge(record.id, opened.kind, steps)
        opened.seen = max(opened.seen, seq)
        if last_at is not None:
            await self.acting.touch(record, last_at)

    def _merge(self, sandbox_id: str, kind: SandboxKind, steps: list[dict[str, Any]]) -> float | None:
        """Count ``steps`` as the control plane counts its own, and keep what it keeps of them; the last one's time."""
        last_at = None
        for step in steps:
            ok = "error" not in step
            observed = step.get("action") is None  # a screenshot alone: an observe
            seconds = float(step.get("ms", 0.0)) / 1000
            self.metrics.lane_step("observe" if observed else "step", kind, ok=ok, seconds=seconds)
            at = float(step.get("at", time.time()))
            if ok:
                last_at = at if last_at is None else max(last_at, at)
            if observed or not ok:  # as through the control plane: no recent action, no output
                continue
            try:
                action = parse_action(step["action"])
            except (KeyError, InvalidArgument):
                continue
            self.activity.note_action(sandbox_id, at, action)
            ran = step.get("exec")
            if isinstance(ran, dict) and action.type == "exec":
                result = ExecResult(
                    exit_code=ran.get("exit_code"),
                    stdout=str(ran.get("stdout", "")),
                    stderr=str(ran.get("stderr", "")),
                    timed_out=bool(ran.get("timed_out")),
                    duration_ms=float(ran.get("duration_ms", 0.0)),
                )
                self.activity.output.add(sandbox_id, action.cmd, result)
        return last_at
