"""The control plane's background work: health probes, lease expiry, warm-pool refills, reconciliation
with the engine (unused task snapshots removed with it), and adoption after the store lost its data. Every
replica runs the loop; only the leader acts, so two replicas never double the work (or the containers): the one
holding the leader lock in the store, or, where the backend offers its own elector (Kubernetes: a Lease), the one
it elects (leader.py)."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time

from pydantic import BaseModel, ConfigDict, Field

from sandbox.backends.base import BackendInstance, RuntimeState, probe_agent
from sandbox.errors import SandboxError
from sandbox.models import Health, SandboxState
from sandbox.observability.metrics import FailureCause
from sandbox.service.adoption import adopt, epoch_changed
from sandbox.service.failures import reason
from sandbox.service.leader import Elector, elector_for
from sandbox.service.parsed_records import ParsedRecords
from sandbox.service.records import (
    SANDBOXES,
    InstanceRecord,
    InstanceState,
    SandboxRecord,
    replica_lock,
)
from sandbox.service.service import SandboxService

TOMBSTONE_S = 3600.0
"""How long an expired sandbox's record stays to tell its client why it is gone."""
SNAPSHOT_GRACE_S = 120.0
"""Reconciliation leaves snapshot images younger than this alone: their records may not be stored yet."""
STUCK_S = 900.0
"""A start or a claim still in progress after this long is taken for stuck, even if its replica lives."""
ENGINE_WORD_POLL_S = 0.25
"""How often a health round asks for the engine's word while it waits (``Backend.status_lag_s``)."""


class LifecycleSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tick_s: float = Field(0.5, gt=0, description="How often the loop wakes.")
    health_interval_s: float = Field(2.0, gt=0, description="Deep health probe of every running sandbox.")
    reconcile_interval_s: float = Field(30.0, gt=0, description="Engine vs store comparison.")
    orphan_grace_s: float = Field(60.0, ge=0, description="An unknown container younger than this is left alone.")
    leader_ttl_s: float = Field(5.0, gt=0, description="Leader lease; another replica takes over after it.")
    probe_concurrency: int = Field(16, ge=1, description="Health probes at once.")
    probes_per_round: int = Field(
        300,
        ge=1,
        description="Deep probes a health round makes at most; a bigger fleet is probed in turn over several rounds "
        "(its stopped instances are still judged every round, from the engine's listing).",
    )
    terminal_deep_probe_s: float = Field(
        10.0,
        ge=0,
        description="A terminal whose agent's pooled connection is open (its process lives; its death closes the "
        "connection, and the next round probes it) is deep-probed at most this often; a sandbox with a display "
        "(X server, window manager, browser, emulator) every round. 0: every sandbox every round.",
    )
    probe_spread: float = Field(
        0.75,
        ge=0,
        le=1,
        description="A round's deep probes start evenly over this share of health_interval_s, not all at once.",
    )


class Lifecycle:
    def __init__(
        self,
        service: SandboxService,
        settings: LifecycleSettings,
        *,
        logger: logging.Logger,
        elector: Elector | None = None,
    ) -> None:
        self.service = service
        self.settings = settings
        self.elector = elector or elector_for(service.backend, service.store, service.replica, settings.leader_ttl_s)
        self._log = logger
        self._leader = False
        self._last_health = 0.0
        self._last_reconcile = 0.0
        self._last_count = 0.0
        self._round: asyncio.Task[None] | None = None
        self._probing: set[str] = set()
        self._suspects: set[str] = set()
        self._parsed = ParsedRecords()
        self._probed_last = ""
        """The id the last round's share of deep probes ended with: the next share starts after it, when a fleet has
        more running sandboxes due than one round probes."""
        self._probed_ok: dict[str, float] = {}
        """Instance -> when the round whose deep probe of it passed started (``time.monotonic()``)."""
        self._round_started = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leader

    async def run(self) -> None:
        heartbeat = asyncio.create_task(self._heartbeat(), name="replica-heartbeat")
        try:
            while True:
                try:
                    await self.tick()
                except SandboxError as e:
                    self._log.warning("lifecycle tick failed: %s", e.message)
                except Exception:
                    self._log.exception("lifecycle tick crashed")
                await asyncio.sleep(self.settings.tick_s)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self._end_round()

    async def _heartbeat(self) -> None:
        """Keep this replica's liveness lock renewed on a beat of its own: a tick under load (health probes of many
        sandboxes, a burst of starts) can last longer than the lock, and other replicas would then take this one's
        starts in progress for orphans."""
        store, replica = self.service.store, self.service.replica
        while True:
            try:
                await store.try_lock(replica_lock(replica), replica, self.settings.leader_ttl_s * 3)
            except SandboxError as e:
                self._log.warning("could not renew this replica's liveness lock: %s", e.message)
            await asyncio.sleep(self.settings.leader_ttl_s / 2)

    async def tick(self) -> None:
        store, now = self.service.store, time.monotonic()
        replica = self.service.replica
        await store.try_lock(replica_lock(replica), replica, self.settings.leader_ttl_s * 3)  # "I am alive"
        if now - self._last_count >= self.settings.reconcile_interval_s:
            self._last_count = now
            await self.service.count_reservations()  # every replica: the others' instances take room too
        was_leader = self._leader
        try:
            self._leader = await self.elector.acquire()
        except SandboxError:
            self._leader = False  # not known to lead: act as a follower until the elector answers
            self.service.metrics.set_leader(False)
            await self._end_round()
            raise
        self.service.metrics.set_leader(self._leader)
        if not self._leader:
            await self._end_round()
            return
        if not was_leader:
            self._log.info(
                "replica %s leads the background work", self.service.replica, extra={"replica": self.service.replica}
            )
            self._last_health = self._last_reconcile = 0.0  # a new leader checks (and syncs snapshot pools) at once
        if await epoch_changed(self.service):
            await self.adopt()
        await self.relieve_pressure()
        await self.service.pools.refill()
        records = await self.expire_leases()
        interval = self.settings.health_interval_s
        if now - self._last_health >= interval and (self._round is None or self._round.done()):
            self._last_health = now
            await self.service.sync_snapshot_pools()
            self._round = asyncio.create_task(self._health_round(interval * self.settings.probe_spread, records))
        if now - self._last_reconcile >= self.settings.reconcile_interval_s:
            self._last_reconcile = now
            await self.reconcile()

    async def relieve_pressure(self) -> None:
        """Under memory pressure (the kernel's PSI), warm instances go first: half of them a tick, until it clears
        (pools do not refill meanwhile; held sandboxes are never touched)."""
        admission = self.service.admission
        if admission.pressure is None or not admission.pressure.under_pressure():
            return
        warm = admission.ledger.warm
        if warm.memory_mb > 0:
            evicted = await self.service.pools.evict(warm.scaled(0.5))
            self._log.warning("%s: removed %d warm instance(s)", admission.pressure.describe(), evicted)

    async def _health_round(self, spread_s: float, records: list[SandboxRecord] | None = None) -> None:
        """One round of :meth:`check_health`, beside the ticks: spread out, it lasts about as long as the interval,
        and lease expiry and pool refills must not wait for it. ``records``: as the tick just read them."""
        try:
            await self.check_health(spread_s=spread_s, records=records)
        except SandboxError as e:
            self._log.warning("health round failed: %s", e.message)
        except Exception:
            self._log.exception("health round crashed")

    async def _end_round(self) -> None:
        if self._round is not None:
            self._round.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._round
            self._round = None

    async def stop(self) -> None:
        """Stop leading and give up the locks (the loop's task is the caller's to cancel)."""
        await self._end_round()
        store, replica = self.service.store, self.service.replica
        await store.unlock(replica_lock(replica), replica)
        if self._leader:
            await self.elector.release()
            self._leader = False
            self.service.metrics.set_leader(False)

    async def leave(self) -> None:
        """The replica shuts down: :meth:`stop`, and the last replica to leave removes the warm instances, which
        nobody would hand out until a replica starts again (held sandboxes stay, for the next start to serve)."""
        await self.stop()
        if not await self._others_alive():
            await self.retire_warm()

    async def _others_alive(self) -> bool:
        """Whether another replica lives: one leads, or one that started or claimed an instance renews its lock."""
        store, replica = self.service.store, self.service.replica
        leader = await self.elector.holder()
        if leader is not None and leader != replica:
            return True
        owners = {r.owner for r in (await self.service.instances.all()).values() if r.owner and r.owner != replica}
        for owner in owners:
            if await store.holder(replica_lock(owner)) == owner:
                return True
        return False

    async def retire_warm(self) -> int:
        """Remove every queued warm instance (each a compare-and-set: one claimed meanwhile is left to its sandbox)."""
        retired = 0
        for instance, record in (await self.service.instances.all()).items():
            if record.state is not InstanceState.WARM:
                continue
            if record.pool is not None:
                await self.service.store.remove(record.pool, instance)
            try:
                retired += await self.service.instances.retire(instance, expected=record)
            except SandboxError as e:
                self._log.warning("could not remove warm instance %s: %s", instance, e.message)
        if retired:
            self._log.info("removed %d warm instance(s) nobody would hand out", retired)
        return retired

    async def adopt(self) -> None:
        """The store lost its data (or this replica never saw its epoch): rebuild what the engine can tell."""
        self._suspects.clear()  # judged against records that may be gone
        self._parsed = ParsedRecords()  # a wiped store hands out versions again from its start
        adopted = await adopt(self.service, logger=self._log)
        if any(adopted.values()):
            self._log.warning("the state store had lost records; adopted again from the engine: %s", adopted)

    async def _records(self) -> list[SandboxRecord]:
        """Every sandbox's record, shared with the next read (``ParsedRecords``): copy one before handing it on."""
        return await self._parsed.read(self.service.store)

    async def expire_leases(self) -> list[SandboxRecord]:
        """Expire the sandboxes whose lease ended; returns the records as read (the health round starts from them:
        decoding thousands of records costs the store more than the round's own work)."""
        now = time.time()
        records = await self._records()
        for record in records:
            if record.state is SandboxState.EXPIRED:
                if now - record.expires_at > TOMBSTONE_S:
                    await self.service.store.delete(SANDBOXES, record.id)
                continue
            ended = record.lease_end()
            if ended is not None:
                await self.service.expire(record.model_copy(), ended)
        return records

    async def check_health(self, *, spread_s: float = 0.0, records: list[SandboxRecord] | None = None) -> None:
        """The engine's listing of the instances that are not running, then deep probes of the others.

        Only the stopped ones are listed: with hundreds running, listing them all each round cost the engine more
        than the probes. A running sandbox's agent answers for it, and one that does not is inspected.

        ``spread_s``: the deep probes start evenly over this long, ``probe_concurrency`` at a time, instead of all
        at once: hundreds of idle sandboxes then cost a steady trickle, not a wave every interval that the steps in
        flight queue behind. (Not one at a time: each wake-up of the event loop costs the control plane too, and a
        batch shares it.) Each sandbox keeps its place in the order of the records, so it is probed about once per
        interval.
        """
        # Records first: every instance they name was started before they were saved, so the listing taken after
        # them shows each as it is now.
        records = records if records is not None else await self._records()
        stopped = {s.id: s for s in await self.service.backend.list_not_running()}
        checks, now = [], time.monotonic()
        probes: list[SandboxRecord] = []
        first: list[SandboxRecord] = []  # agents whose connection closed since their last probe, pods not Ready
        self._round_started = now
        running = {r.instance for r in records if r.state is SandboxState.RUNNING}
        self._probed_ok = {i: at for i, at in self._probed_ok.items() if i in running}
        for record in records:
            if record.state is not SandboxState.RUNNING or record.id in self._probing:
                continue
            engine = stopped.get(record.instance)
            if engine is None:
                due = self._due(record, now)
                if due is not None:
                    (first if due else probes).append(record)
            elif engine.state is RuntimeState.RUNNING:  # running, and the engine doubts it serves (node lost?)
                first.append(record)
            elif engine.state is not RuntimeState.PAUSED:  # paused: a snapshot is being taken (docker commit)
                checks.append(self._fail(record, *_stopped(engine)))
        await asyncio.gather(*checks, self._probe_all(first + self._in_turn(probes, len(first)), spread_s))

    def _due(self, record: SandboxRecord, now: float) -> bool | None:
        """Whether a running sandbox is deep-probed this round: None when it need not be (a terminal whose last deep
        probe passed within ``terminal_deep_probe_s`` and whose agent's pooled connection shows its process alive),
        True when it must be before any other (that connection has closed since: its agent most likely died), False
        when in its turn. What a terminal's deep probe adds to its connection is its shell's check, which starts a
        process only every 10 s anyway (``SPAWN_PROOF_S`` in the agent), and its workspace's. A sandbox with a
        display is probed every round: its X server, window manager or browser can die while its agent lives."""
        if record.spec.kind.has_display:
            return False
        passed = self._probed_ok.get(record.instance)
        if passed is None or now - passed >= self.settings.terminal_deep_probe_s:
            return False
        return None if self.service.backend.agent(record.instance).connected() else True

    def _in_turn(self, probes: list[SandboxRecord], taken: int = 0) -> list[SandboxRecord]:
        """This round's share of the deep probes: all of them up to ``probes_per_round``, else the next
        ``probes_per_round`` in the order of their ids, from where the last round stopped (a deep probe costs the
        control plane 0.2 to 0.4 ms of CPU, measured at 5,000 sandboxes: all of them every 2 s would take most of a
        core, while a pod that dies shows in the engine's listing at once). ``taken``: probes this round makes
        before these (terminals whose agent's connection closed)."""
        limit = max(self.settings.probes_per_round - taken, 0)
        if len(probes) <= limit:
            return probes
        # The turn is kept as an id, not a position: which sandboxes are due changes from round to round (a terminal
        # probed lately is not), and a position into a list that shrank skips the ids that moved past it.
        ordered = sorted(probes, key=lambda r: r.id)
        start = bisect.bisect_right(ordered, self._probed_last, key=lambda r: r.id) % len(ordered)
        share = (ordered[start:] + ordered[:start])[:limit]
        if share:
            self._probed_last = share[-1].id
        return share

    async def _probe_all(self, probes: list[SandboxRecord], spread_s: float) -> None:
        batch = self.settings.probe_concurrency
        semaphore = asyncio.Semaphore(batch)
        loop = asyncio.get_running_loop()
        gap, start = spread_s / max(-(-len(probes) // batch), 1), loop.time()
        started = []
        for i, record in enumerate(probes):
            wait = start + (i // batch) * gap - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            started.append(asyncio.create_task(self._probe(record, semaphore)))
        await asyncio.gather(*started)

    async def _probe(self, record: SandboxRecord, semaphore: asyncio.Semaphore) -> None:
        backend = self.service.backend
        async with semaphore:
            health = await probe_agent(backend, record.instance)
            if health.ok:
                self._probed_ok[record.instance] = self._round_started
                return
            self._probed_ok.pop(record.instance, None)
            engine = await backend.inspect(record.instance)  # it may have stopped since the listing, or be gone
            if engine.state is RuntimeState.RUNNING:
                health = await probe_agent(backend, record.instance)  # a second chance
        if engine.state is RuntimeState.RUNNING and _agent_silent(health):
            engine = await self._engines_word(record.instance, engine)
        if health.ok or engine.state is RuntimeState.PAUSED or not await self._still_runs(record):
            return
        running = engine.state is RuntimeState.RUNNING
        await self._fail(record, *((reason(health), "probe_failed") if running else _stopped(engine)))

    async def _engines_word(self, instance: str, engine: BackendInstance) -> BackendInstance:
        """The engine's word on an instance whose agent does not answer while the engine says it runs. Most often
        its container died and the engine has not noticed yet (a kubelet notices within a second or two): its state
        once it changes, within the backend's ``status_lag_s``; still running after that (a hung agent), as it was."""
        deadline = asyncio.get_running_loop().time() + self.service.backend.status_lag_s
        while engine.state is RuntimeState.RUNNING and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(ENGINE_WORD_POLL_S)
            engine = await self.service.backend.inspect(instance)
        return engine

    async def _still_runs(self, record: SandboxRecord) -> bool:
        """Whether the sandbox still runs the instance probed: a round that lasts seconds sees sandboxes deleted,
        reset or recovered after its records were read, and their old instances fail for no fault of theirs."""
        doc = await self.service.store.get(SANDBOXES, record.id)
        if doc is None or doc.get("instance") != record.instance:
            return False
        return doc.get("state") == SandboxState.RUNNING.value

    async def _fail(self, record: SandboxRecord, why: str, cause: FailureCause) -> None:
        self._probing.add(record.id)
        try:  # mark_failed acts only if the record still names this instance (not deleted or swapped meanwhile)
            await self.service.mark_failed(record.model_copy(), why, cause=cause)
        except SandboxError as e:
            self._log.warning(
                "handling the failure of %s failed: %s", record.id, e.message, extra={"sandbox_id": record.id}
            )
        finally:
            self._probing.discard(record.id)

    async def reconcile(self) -> None:
        """Remove instances nobody uses; forget queued instances whose container is gone.

        Used: a WARM instance in the queue of a pool still kept; a SERVING one that its sandbox's record names;
        a STARTING one, or a SERVING one whose sandbox's record is still being written, while the replica doing it
        lives (or within the grace, for records without an owner).
        Unused in two passes in a row (and old enough) is an orphan: a create cut off by a crash, a container
        someone else left with our labels. Each removal is a compare-and-set on the record as read in this pass,
        so an instance claimed meanwhile is never removed. Nothing is removed while the store's epoch changes.
        Snapshot images no record names go too, and task snapshots nobody used lately (``task_snapshots``).
        """
        service = self.service
        store, backend = service.store, service.backend
        if await epoch_changed(service):
            return  # adopt first (next tick)
        known = await service.instances.all()
        # Queues before the engine listing: an instance queued in between shows as used in the next pass.
        queues = {k.pool for k in known.values() if k.pool} & service.pools.keys()
        waiting = {item for key in queues for item in await store.items(key)}
        serving = {r.instance: r.id for r in await self._records() if r.state is not SandboxState.EXPIRED}
        on_engine = {s.id: s for s in await backend.list_instances()}
        owners = {r.owner for r in known.values() if r.owner}
        alive = {owner for owner in owners if await store.holder(replica_lock(owner)) == owner}
        now, grace = time.time(), self.settings.orphan_grace_s
        unused = set()
        for instance in set(on_engine) | set(known):
            record = known.get(instance)
            if record is None:
                if now - on_engine[instance].created_at >= grace:
                    unused.add(instance)
            elif _unused(record, waiting, serving, alive, now, grace):
                unused.add(instance)
        if await epoch_changed(service):
            return
        for instance in unused & self._suspects:
            record = known.get(instance)
            self._log.warning("removing orphan instance %s", instance, extra={"instance": instance})
            with contextlib.suppress(SandboxError):
                await service.instances.retire(instance, expected=record)
        self._suspects = unused - self._suspects
        for instance, record in known.items():  # a warm instance whose container died
            if instance not in on_engine and record.pool and instance in waiting:
                await store.remove(record.pool, instance)
        await service.collect_snapshot_images(min_age_s=max(grace, SNAPSHOT_GRACE_S))
        await service.collect_task_snapshots()  # unused ones: their records, warm instances and images


def _agent_silent(health: Health) -> bool:
    agent = health.checks.get("agent")
    return not health.ok and agent is not None and not agent.ok


def _stopped(engine: BackendInstance) -> tuple[str, FailureCause]:
    """Why an instance that is not running failed, and the failure's cause for the metrics."""
    if engine.state is RuntimeState.MISSING:
        return "its container is gone", "container_gone"
    state = f"{engine.state.value} (exit code {engine.exit_code})"
    state += f": {engine.detail}" if engine.detail else ""
    return f"its container is {state}", "container_exited"


def _unused(
    record: InstanceRecord, waiting: set[str], serving: dict[str, str], alive: set[str], now: float, grace: float
) -> bool:
    age = now - record.since
    in_progress = age < grace or (record.owner in alive and age < STUCK_S)
    if record.state is InstanceState.WARM:
        return record.id not in waiting
    if record.state is InstanceState.SERVING:
        return serving.get(record.id) != record.sandbox and not in_progress
    if record.state is InstanceState.STARTING:
        return not in_progress
    return age >= grace  # RETIRING: a removal that did not finish
