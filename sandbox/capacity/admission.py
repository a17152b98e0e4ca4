"""Admission: whether a start may go ahead, decided before anything starts.

A held demand (create, create_group, a reset or recovery that needs a new instance) fits when the tenant's quota
and the host's allocatable resources hold it beside what is held and what was granted and not yet started. Warm
instances never block it: they are evicted to make room when it starts (``evictable``). A warm demand (a pool's or a
snapshot's replica) fits within the warm share and within what held sandboxes leave.

What does not fit is refused at once (``CapacityExhausted``: what was asked, what is free, what to do) or, when the
caller asks to wait, queued (``queue.py``) and served as capacity frees. A reset or recovery replaces an instance
that goes right after, so it may use a small surge beyond capacity and waits briefly beyond it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.capacity.ledger import Entry, Ledger
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.pressure import MemoryPressure
from sandbox.capacity.queue import Waiter, WaitQueue
from sandbox.capacity.quotas import Quota, QuotaBook
from sandbox.capacity.report import CapacityReport, Resources, TenantUse, WaitingCall
from sandbox.capacity.usage import ZERO, Usage
from sandbox.errors import CapacityExhausted, InvalidArgument
from sandbox.models import SandboxKind, SandboxSpec

RETRY_AFTER_S = 5.0


@dataclass(frozen=True)
class Refusal:
    """Why a demand does not fit now: ``never`` when it cannot fit even on an empty host or an unused quota."""

    reason: str
    never: bool = False
    quota: bool = False


class Grant:
    """Capacity set aside for ``count`` instances of one tenant; each start or warm claim takes one unit, and what
    is not taken is given back when the grant closes."""

    def __init__(self, admission: Admission, tenant: str, unit: Usage, count: int, *, replacing: bool) -> None:
        self._admission = admission
        self.tenant = tenant
        self.unit = unit
        self.left = count
        self.replacing = replacing

    def take(self) -> None:
        if self.left > 0:
            self.left -= 1
            self._admission._give_back(self, 1)

    def close(self) -> None:
        if self.left > 0:
            left, self.left = self.left, 0
            self._admission._give_back(self, left)


class Admission:
    def __init__(
        self,
        model: CapacityModel,
        quotas: QuotaBook | None = None,
        *,
        pressure: MemoryPressure | None = None,
        logger: logging.Logger | None = None,
        on_refusal: Callable[[str, str], None] | None = None,
    ) -> None:
        self.model = model
        self.quotas = quotas or QuotaBook()
        self.ledger = Ledger()
        self.queue = WaitQueue()
        self.pressure = pressure
        self._log = logger or logging.getLogger(__name__)
        self._on_refusal = on_refusal
        self._pending = ZERO
        self._pending_surge = ZERO
        self._pending_tenants: dict[str, tuple[int, Usage]] = {}
        self._blocked = False
        self.refusals: Counter[tuple[str, str]] = Counter()
        """(tenant, why: capacity | quota | pressure) -> refusals so far."""

    # ------------------------------------------------------------------ held demands

    async def admit(
        self, tenant: str, spec: SandboxSpec, count: int = 1, *, admin: bool = False, wait_s: float = 0.0
    ) -> Grant:
        """A grant for ``count`` new sandboxes of ``spec``, all or none; waits up to ``wait_s`` for one (at most the
        setting ``max_wait_s``: a longer wait is cut to it)."""
        if not wait_s >= 0:
            raise InvalidArgument(f"wait_s must be 0 or more seconds, not {wait_s:g}")
        wait_s = min(wait_s, self.model.settings.max_wait_s)
        quota = self.quotas.for_tenant(tenant, admin=admin)
        if quota.max_group is not None and count > quota.max_group:
            raise self.refuse(
                tenant, "quota", f"a group of {count} exceeds tenant {tenant!r}'s max_group of {quota.max_group}"
            )
        unit = self.model.reservation(spec)
        refusal = self.refusal(tenant, unit, count, quota)
        if refusal is None and self.queue_ahead():
            refusal = Refusal(f"{len(self.queue)} calls wait for capacity ahead of this one")
        if refusal is None:
            return self._grant(tenant, unit, count, replacing=False)
        if wait_s <= 0 and self._freed_soon(refusal, unit.times(count)):
            wait_s = self.model.settings.replace_wait_s  # instances being removed make the room: wait for them
        if refusal.never or wait_s <= 0:
            raise self.refuse(tenant, _why(refusal), self._message(refusal, spec, count, wait_s))
        return await self._wait(tenant, spec, unit, count, quota, wait_s)

    async def admit_replacement(self, tenant: str, spec: SandboxSpec) -> Grant:
        """A grant for the new instance of a reset or recovery: its old instance goes right after, so it may use the
        surge beyond capacity, and it waits up to ``replace_wait_s`` beyond that. Quotas do not apply (the tenant
        holds as many sandboxes after as before)."""
        unit = self.model.reservation(spec)
        if self._fits_host(unit, surge=True) and not self._pressed():
            return self._grant(tenant, unit, 1, replacing=True)
        refusal = self.refusal(tenant, unit, 1, None, surge=True)
        assert refusal is not None
        wait_s = self.model.settings.replace_wait_s
        if refusal.never or wait_s <= 0:
            raise self.refuse(tenant, _why(refusal), self._message(refusal, spec, 1, 0.0))
        return await self._wait(tenant, spec, unit, 1, None, wait_s, replacing=True)

    def refusal(
        self, tenant: str, unit: Usage, count: int, quota: Quota | None, *, surge: bool = False
    ) -> Refusal | None:
        """Why ``count`` x ``unit`` does not fit now for ``tenant`` (None: it fits)."""
        demand = unit.times(count)
        if quota is not None:
            held = self.ledger.tenant(tenant)
            pending_count, pending = self._pending_tenants.get(tenant, (0, ZERO))
            over = quota.exceeded(held.count + pending_count + count, held.reserved + pending + demand)
            if over:
                never = bool(quota.exceeded(count, demand))
                return Refusal(f"over the quota of tenant {tenant!r}: " + "; ".join(over), never=never, quota=True)
        allocatable = self.model.allocatable
        if allocatable is None:
            return None
        if not demand.fits_in(allocatable):
            short = "; ".join(demand.short_of(allocatable)).replace(" free", " allocatable in all")
            return Refusal(f"more than this host holds even empty ({short})", never=True)
        if self._pressed():
            assert self.pressure is not None
            return Refusal(self.pressure.describe())
        if not self._fits_host(demand, surge=surge):
            room = self.free(surge=surge)
            return Refusal("not enough free capacity (" + "; ".join(demand.short_of(room)) + ")")
        return None

    def _freed_soon(self, refusal: Refusal, demand: Usage) -> bool:
        """Whether the room ``refusal`` lacks is held by instances being removed (a delete just before a create)."""
        if refusal.never or refusal.quota or self._pressed() or self.queue_ahead():
            return False
        return demand.fits_in(self.free() + self.ledger.retiring)

    def retiring(self, instance: str) -> None:
        """``instance`` is being removed: its reservation is soon free."""
        self.ledger.mark_retiring(instance)

    def free(self, *, surge: bool = False) -> Usage:
        """What held demands may still reserve (warm instances count as free: they are evicted for held ones)."""
        allocatable = self.model.allocatable
        if allocatable is None:
            return Usage(float("inf"), float("inf"), 1 << 62)
        room = allocatable - self.ledger.held - self._pending - self._pending_surge
        if surge:
            room = room + (self.model.surge or ZERO)
        return room

    def _fits_host(self, demand: Usage, *, surge: bool = False) -> bool:
        return self.model.allocatable is None or demand.fits_in(self.free(surge=surge))

    def _pressed(self) -> bool:
        return self.pressure is not None and self.pressure.under_pressure()

    # ------------------------------------------------------------------ warm demands

    def may_warm(self, spec: SandboxSpec) -> bool:
        """Whether one more warm instance of ``spec`` fits: within the warm share, beside what held sandboxes and
        grants take, with the host not under pressure."""
        allocatable, warm_room = self.model.allocatable, self.model.warm_room
        if allocatable is None or warm_room is None:
            return True
        if self._pressed() or self.queue_ahead():
            return False
        unit = self.model.reservation(spec)
        if not (self.ledger.warm + unit).fits_in(warm_room):
            return False
        return (self.ledger.held + self.ledger.warm + self._pending + unit).fits_in(allocatable)

    def check_warm_request(self, spec: SandboxSpec, replicas: int, *, tenant: str = "-") -> None:
        """Refuse a snapshot's ``replicas`` that the warm share could never hold."""
        warm_room = self.model.warm_room
        if warm_room is None or replicas == 0:
            return
        demand = self.model.reservation(spec).times(replicas)
        if not demand.fits_in(warm_room):
            fit = self.model.reservation(spec).how_many_fit(warm_room)
            short = "; ".join(demand.short_of(warm_room)).replace(" free", " in the share")
            raise self.refuse(
                tenant,
                "capacity",
                f"{replicas} warm replicas of a {spec.kind.value} sandbox need more than the warm share of this host "
                f"({self.model.settings.warm_share:.0%}: {short}); ask for at most {fit}, or raise capacity.warm_share",
            )

    def overflow(self, unit: Usage) -> Usage:
        """How much warm capacity must go before a new held instance reserving ``unit`` starts (zero: none)."""
        allocatable = self.model.allocatable
        if allocatable is None:
            return ZERO
        over = self.ledger.held + self.ledger.warm + unit - allocatable
        return Usage(max(0.0, over.cpus), max(0.0, over.memory_mb), max(0, over.pids))

    # ------------------------------------------------------------------ the ledger, as instances come and go

    def started(self, instance: str, spec: SandboxSpec, *, tenant: str | None, sandbox: str | None) -> None:
        warm = sandbox is None
        self.ledger.add(instance, Entry(self.model.reservation(spec), warm=warm, tenant=tenant, sandbox=sandbox))

    def claimed(self, instance: str, spec: SandboxSpec, *, tenant: str, sandbox: str) -> None:
        self.ledger.claim(instance, self.model.reservation(spec), tenant=tenant, sandbox=sandbox)

    def ended(self, instance: str) -> None:
        if self.ledger.release(instance) is not None:
            self._serve()

    # ------------------------------------------------------------------ waiting

    def waiting(self, tenant: str | None = None) -> list[WaitingCall]:
        """Who waits, in the order they will be served (``tenant``: only its own, positions still global)."""
        now, mono = time.time(), time.monotonic()
        return [
            WaitingCall(
                ticket=w.ticket,
                tenant=w.tenant,
                kind=w.kind,
                count=w.count,
                position=i + 1,
                waited_s=round(now - w.since, 3),
                gives_up_in_s=round(max(0.0, w.deadline - mono), 3),
            )
            for i, w in enumerate(self.queue.order())
            if tenant is None or w.tenant == tenant
        ]

    def gauges(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """What the capacity gauges show: use -> resource -> amount, and tenant -> resource -> amount."""
        uses = {"held": self.ledger.held, "warm": self.ledger.warm, "granted": self._pending + self._pending_surge}
        allocatable = self.model.allocatable
        if allocatable is not None:
            uses["allocatable"] = allocatable
        tenants = {
            name: {**use.reserved.as_dict(), "sandboxes": float(use.count)}
            for name, use in self.ledger.tenants().items()
        }
        return {use: usage.as_dict() for use, usage in uses.items()}, tenants

    def report(self, tenant: str | None = None, *, admin: bool = False) -> CapacityReport:
        """The capacity as the API shows it: all tenants' to an admin, else ``tenant``'s own."""
        allocatable, free = self.model.allocatable, self.free() if self.model.bounded else None
        kinds = [SandboxSpec(kind=kind) for kind in SandboxKind]
        tenants = self.ledger.tenants() if admin else {tenant: self.ledger.tenant(tenant)} if tenant else {}
        return CapacityReport(
            bounded=self.model.bounded,
            allocatable=_resources(allocatable),
            held=_resources(self.ledger.held) or Resources(),
            warm=_resources(self.ledger.warm) or Resources(),
            granted=_resources(self._pending + self._pending_surge) or Resources(),
            free=_resources(free),
            fits_now={}
            if free is None
            else {s.kind.value: self.model.reservation(s).how_many_fit(free) for s in kinds},
            fits_empty={s.kind.value: n for s in kinds if (n := self.model.limit_for(s)) is not None},
            under_pressure=self.pressure.describe() if self._pressed() and self.pressure is not None else None,
            waiting=self.waiting(None if admin else tenant),
            tenants=[
                TenantUse(
                    tenant=name,
                    sandboxes=use.count,
                    reserved=_resources(use.reserved) or Resources(),
                    quota=self.quotas.for_tenant(name, admin=admin and name == tenant).model_dump(),
                )
                for name, use in sorted(tenants.items())
            ],
        )

    def queue_ahead(self) -> bool:
        """Whether a waiter is held back by the host's capacity (a newcomer queues behind it, not overtaking)."""
        return self._blocked and len(self.queue) > 0

    async def _wait(
        self,
        tenant: str,
        spec: SandboxSpec,
        unit: Usage,
        count: int,
        quota: Quota | None,
        wait_s: float,
        *,
        replacing: bool = False,
    ) -> Grant:
        waiter = Waiter(tenant, spec.kind.value, count, (unit, quota, replacing), time.monotonic() + wait_s)
        self.queue.add(waiter)
        self._serve()
        handed = False
        try:
            async with asyncio.timeout(wait_s):
                grant: Grant = await asyncio.shield(waiter.future)
            handed = True
            return grant
        except TimeoutError:
            refusal = self.refusal(tenant, unit, count, quota, surge=replacing) or Refusal("capacity did not free")
            message = self._message(refusal, spec, count, wait_s, waited=True)
            raise self.refuse(tenant, _why(refusal), message) from None
        finally:
            self.queue.remove(waiter)
            if not handed:
                if waiter.future.done() and not waiter.future.cancelled():
                    waiter.future.result().close()  # served as it gave up: nothing is kept
                else:
                    waiter.future.cancel()
                self._serve()

    def _serve(self) -> None:
        """Grant waiters in order while the head fits. A waiter held back by its own tenant's quota is passed
        over; one held back by the host's capacity stops the round (nobody overtakes it)."""
        self._blocked = False
        for waiter in self.queue.order():
            if waiter.future.done():
                continue
            unit, quota, replacing = waiter.demand
            refusal = self.refusal(waiter.tenant, unit, waiter.count, quota, surge=replacing)
            if refusal is not None:
                if refusal.quota:
                    continue
                self._blocked = True
                return
            self.queue.remove(waiter)
            waiter.future.set_result(self._grant(waiter.tenant, unit, waiter.count, replacing=replacing))

    # ------------------------------------------------------------------ grants

    def _grant(self, tenant: str, unit: Usage, count: int, *, replacing: bool) -> Grant:
        demand = unit.times(count)
        if replacing:
            self._pending_surge = self._pending_surge + demand
        else:
            self._pending = self._pending + demand
            n, usage = self._pending_tenants.get(tenant, (0, ZERO))
            self._pending_tenants[tenant] = (n + count, usage + demand)
        return Grant(self, tenant, unit, count, replacing=replacing)

    def _give_back(self, grant: Grant, count: int) -> None:
        demand = grant.unit.times(count)
        if grant.replacing:
            self._pending_surge = self._pending_surge - demand
        else:
            self._pending = self._pending - demand
            n, usage = self._pending_tenants.get(grant.tenant, (0, ZERO))
            if n - count <= 0:
                self._pending_tenants.pop(grant.tenant, None)
            else:
                self._pending_tenants[grant.tenant] = (n - count, usage - demand)
        self._serve()

    # ------------------------------------------------------------------ refusals

    def refuse(self, tenant: str, why: str, message: str) -> CapacityExhausted:
        self.refusals[(tenant, why)] += 1
        if self._on_refusal is not None:
            self._on_refusal(tenant, why)
        self._log.info("refused for tenant %s: %s", tenant, message, extra={"tenant": tenant, "refusal": why})
        return CapacityExhausted(message)

    def _message(self, refusal: Refusal, spec: SandboxSpec, count: int, wait_s: float, *, waited: bool = False) -> str:
        what = f"{count} {spec.kind.value} sandbox{'es' if count != 1 else ''}"
        unit = self.model.reservation(spec)
        asked = f"{what} reserving {unit.memory_mb:,.0f} MiB and {unit.cpus:g} CPU each"
        head = f"cannot start {asked}: {refusal.reason}"
        if waited:
            head += f", after waiting {wait_s:g} s"
        if refusal.quota:
            hint = "Delete sandboxes of this tenant, or ask an operator to raise its quota (the tokens file)"
        elif refusal.never:
            fit = unit.how_many_fit(self.model.allocatable or ZERO)
            hint = (
                f"Ask for at most {fit} at once, or for smaller resources, or add capacity"
                if fit
                else "This host cannot hold even one: ask for smaller resources, or run it on a larger host"
            )
        elif _why(refusal) == "pressure":
            hint = f"Wait for the pressure to clear (retry after {RETRY_AFTER_S:g} s), or pass wait_s to queue"
        elif waited:
            hint = "Delete sandboxes you no longer need, ask for fewer, or wait longer (wait_s)"
        else:
            fit = unit.how_many_fit(self.free())
            hint = (
                f"{fit} fit now. Delete sandboxes you no longer need, ask for fewer, or pass wait_s to queue "
                f"for capacity (retry after {RETRY_AFTER_S:g} s)"
            )
        return f"{head}. {hint}."


def _resources(usage: Usage | None) -> Resources | None:
    if usage is None:
        return None
    return Resources.model_validate(usage.as_dict())  # the gauges' rounding: one rule for both


def _why(refusal: Refusal) -> str:
    if refusal.quota:
        return "quota"
    if "pressure" in refusal.reason:
        return "pressure"
    return "capacity"
