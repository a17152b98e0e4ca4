"""Admission on a small host: grants, refusals that say what to do, the fair wait queue, warm share, surge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from sandbox.backends.base import HostFacts
from sandbox.capacity.admission import Admission, Grant
from sandbox.capacity.ledger import Entry
from sandbox.capacity.model import CapacityModel
from sandbox.capacity.pressure import MemoryPressure
from sandbox.capacity.quotas import Quota, QuotaBook
from sandbox.capacity.settings import CapacitySettings
from sandbox.capacity.usage import Usage
from sandbox.errors import CapacityExhausted, ResourceExhausted
from sandbox.models import SandboxSpec
from tests.polling import eventually

TERMINAL = SandboxSpec(kind="terminal")
REQUESTS = {"terminal": {"cpus": 0.01, "memory_mb": 32, "pids": 16}}
"""A terminal reserves 32 MiB here, whatever the default (these tests are of admission, not of the defaults)."""
HOST = HostFacts(cpus=2, memory_mb=1024 + 8 * 32, pids=32_768)  # room for 8 terminals


def admission(quotas: QuotaBook | None = None, **settings: object) -> Admission:
    return Admission(CapacityModel(CapacitySettings.model_validate({"requests": REQUESTS, **settings}), HOST), quotas)


def hold(a: Admission, grant: Grant, instance: str, tenant: str = "t") -> None:
    """What ``Instances.start`` does: the instance enters the ledger and takes a unit of the grant."""
    a.started(instance, TERMINAL, tenant=tenant, sandbox=f"sb-{instance}")
    grant.take()


async def test_a_group_that_fits_is_granted_and_its_units_move_to_the_ledger() -> None:
    a = admission()
    grant = await a.admit("t", TERMINAL, 8)
    assert a.free().memory_mb == pytest.approx(0)
    for i in range(8):
        hold(a, grant, f"i{i}")
    grant.close()
    assert a.ledger.held.memory_mb == pytest.approx(8 * 32) and a.free().memory_mb == pytest.approx(0)
    assert a.ledger.tenant("t").count == 8


async def test_a_group_beyond_capacity_is_refused_at_once_saying_what_and_what_to_do() -> None:
    a = admission()
    with pytest.raises(CapacityExhausted) as refused:
        await a.admit("t", TERMINAL, 512, wait_s=60)  # never fits: no wait
    message = refused.value.message
    assert "cannot start 512 terminal sandboxes reserving 32 MiB" in message
    assert "more than this host holds even empty" in message and "Ask for at most 8 at once" in message
    assert isinstance(refused.value, ResourceExhausted)
    assert a.refusals[("t", "capacity")] == 1 and a.free().memory_mb == pytest.approx(8 * 32), "nothing was kept"


async def test_a_full_host_refuses_at_once_without_wait_and_says_how_many_fit() -> None:
    a = admission()
    grant = await a.admit("t", TERMINAL, 6)
    with pytest.raises(CapacityExhausted, match=r"not enough free capacity \(memory: 96 MiB asked, 64 MiB free\)"):
        await a.admit("t", TERMINAL, 3)
    with pytest.raises(CapacityExhausted, match=r"2 fit now\. Delete .* pass wait_s to queue"):
        await a.admit("t", TERMINAL, 3)
    grant.close()


async def test_a_waiting_group_is_served_as_capacity_frees() -> None:
    a = admission()
    first = await a.admit("t", TERMINAL, 8)
    for i in range(8):
        hold(a, first, f"i{i}")
    waiting = asyncio.create_task(a.admit("u", TERMINAL, 2, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    (call,) = a.waiting()
    assert (call.tenant, call.count, call.position) == ("u", 2, 1)
    a.ended("i0")
    assert not waiting.done() or waiting.exception() is not None, "one freed is not room for two"
    a.ended("i1")
    grant = await asyncio.wait_for(waiting, 5)
    assert grant.left == 2 and a.waiting() == []
    grant.close()


async def test_a_waiter_that_gives_up_leaves_nothing_behind() -> None:
    a = admission()
    full = await a.admit("t", TERMINAL, 8)
    with pytest.raises(CapacityExhausted, match=r"after waiting 0\.05 s"):
        await a.admit("t", TERMINAL, 1, wait_s=0.05)
    cancelled = asyncio.create_task(a.admit("t", TERMINAL, 1, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert a.waiting() == [] and len(a.queue) == 0
    full.close()
    assert a.free().memory_mb == pytest.approx(8 * 32), "a waiter that gave up kept capacity"


async def test_a_waiter_served_just_as_it_is_cancelled_gives_its_grant_back() -> None:
    a = admission()
    full = await a.admit("t", TERMINAL, 8)
    waiter = asyncio.create_task(a.admit("t", TERMINAL, 4, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    full.close()  # serves the waiter: its future is set, but the task has not resumed yet
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert a.free().memory_mb == pytest.approx(8 * 32)


async def test_tenants_are_served_in_turn_and_first_come_first_served_within_one() -> None:
    a = admission()
    full = await a.admit("x", TERMINAL, 8)
    order: list[str] = []

    async def wait(tenant: str, tag: str) -> None:
        grant = await a.admit(tenant, TERMINAL, 1, wait_s=30)
        order.append(tag)
        grant.close()

    tasks = []
    for tag, tenant in [("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b")]:
        tasks.append(asyncio.create_task(wait(tenant, tag)))
        queued = len(tasks)
        await _until(lambda: len(a.waiting()) == queued)  # noqa: B023 - awaited before the loop moves on
    assert [(w.tenant, w.position) for w in a.waiting()] == [("a", 1), ("b", 2), ("a", 3), ("a", 4)]
    assert [w.position for w in a.waiting("b")] == [2], "a tenant sees its own calls with their global place"
    full.close()
    await asyncio.gather(*tasks)
    assert order == ["a1", "b1", "a2", "a3"]


async def test_a_newcomer_does_not_overtake_a_waiter_held_back_by_capacity() -> None:
    a = admission()
    held = await a.admit("t", TERMINAL, 6)
    big = asyncio.create_task(a.admit("u", TERMINAL, 4, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    with pytest.raises(CapacityExhausted, match="1 calls wait for capacity ahead of this one"):
        await a.admit("v", TERMINAL, 1)  # it would fit (2 free), but the group of 4 waits first
    held.close()
    (await asyncio.wait_for(big, 5)).close()


async def test_a_waiter_held_back_by_its_own_quota_does_not_block_others() -> None:
    a = admission(QuotaBook({"q": Quota(max_sandboxes=1)}))
    grant = await a.admit("q", TERMINAL, 1)
    hold(a, grant, "q0", tenant="q")
    blocked = asyncio.create_task(a.admit("q", TERMINAL, 1, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    other = await a.admit("r", TERMINAL, 2)  # the host has room: the quota-held waiter does not stop it
    other.close()
    a.ended("q0")
    (await asyncio.wait_for(blocked, 5)).close()


async def test_quotas_hold_and_an_admin_is_not_limited_unless_named() -> None:
    book = QuotaBook({"named-admin": Quota(max_sandboxes=1)}, default=Quota(max_sandboxes=2, max_group=2))
    a = admission(book)
    with pytest.raises(CapacityExhausted, match="max_group of 2"):
        await a.admit("t", TERMINAL, 3)
    first = await a.admit("t", TERMINAL, 2)
    with pytest.raises(CapacityExhausted, match=r"over the quota of tenant 't': sandboxes: 3 would be held, the quota"):
        await a.admit("t", TERMINAL, 1)
    assert a.refusals[("t", "quota")] == 2
    first.close()
    (await a.admit("root", TERMINAL, 5, admin=True)).close()
    with pytest.raises(CapacityExhausted, match="quota"):
        await a.admit("named-admin", TERMINAL, 2, admin=True)


async def test_warm_instances_never_block_a_held_create_and_are_evicted_for_it() -> None:
    a = admission(warm_share=1.0)
    for i in range(8):
        assert a.may_warm(TERMINAL)
        a.started(f"w{i}", TERMINAL, tenant=None, sandbox=None)
    assert not a.may_warm(TERMINAL), "the host is full of warm instances"
    grant = await a.admit("t", TERMINAL, 3)  # held demand sees the warm as free
    assert a.overflow(a.model.reservation(TERMINAL)).memory_mb == pytest.approx(32), "one warm must go first"
    grant.close()


async def test_the_warm_share_bounds_pools_and_snapshot_replicas() -> None:
    a = admission(warm_share=0.5)  # 4 terminals' worth
    for i in range(4):
        assert a.may_warm(TERMINAL)
        a.started(f"w{i}", TERMINAL, tenant=None, sandbox=None)
    assert not a.may_warm(TERMINAL)
    a.check_warm_request(TERMINAL, 4)
    with pytest.raises(CapacityExhausted, match=r"ask for at most 4, or raise capacity\.warm_share"):
        a.check_warm_request(TERMINAL, 5)


async def test_a_replacement_may_use_the_surge_then_waits_then_refuses() -> None:
    a = admission(replace_surge=0.125, replace_wait_s=0.05)  # the surge holds one terminal
    full = await a.admit("t", TERMINAL, 8)
    surge = await a.admit_replacement("t", TERMINAL)
    with pytest.raises(CapacityExhausted, match=r"after waiting 0\.05 s"):
        await a.admit_replacement("t", TERMINAL)
    surge.close()
    full.close()


async def test_memory_pressure_stops_admission_with_hysteresis(tmp_path: Path) -> None:
    psi = tmp_path / "memory"
    pressure = MemoryPressure(high=25, low=5, path=psi)
    a = Admission(CapacityModel(CapacitySettings.model_validate({"requests": REQUESTS}), HOST), pressure=pressure)

    def reads(avg10: float) -> None:
        psi.write_text(f"some avg10={avg10:.2f} avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00\n")
        pressure._read_at = 0.0  # the next call reads the file again

    reads(30)
    with pytest.raises(CapacityExhausted, match=r"memory pressure \(PSI memory some avg10 = 30.0%\)"):
        await a.admit("t", TERMINAL, 1)
    assert not a.may_warm(TERMINAL) and a.refusals[("t", "pressure")] == 1
    reads(10)
    assert pressure.under_pressure(), "10% is between the marks: still stopped"
    reads(4)
    (await a.admit("t", TERMINAL, 1)).close()


def test_the_ledger_resync_keeps_what_was_added_and_drops_what_was_released_meanwhile() -> None:
    a = admission()
    a.started("old", TERMINAL, tenant="t", sandbox="sb-old")
    a.started("gone", TERMINAL, tenant="t", sandbox="sb-gone")
    since = a.ledger.mark()
    stored = [(i, Entry(Usage(0.01, 32, 16), warm=False, tenant="t", sandbox=f"sb-{i}")) for i in ("old", "gone")]
    a.started("new", TERMINAL, tenant="t", sandbox="sb-new")  # added while the store was read
    a.ended("gone")  # released while the store was read
    a.ledger.resync(stored, since=since)
    assert "new" in a.ledger and "old" in a.ledger and "gone" not in a.ledger
    assert a.ledger.tenant("t").count == 2 and a.ledger.held.memory_mb == pytest.approx(64)


async def _until(condition: Callable[[], bool]) -> None:
    await eventually(condition, 5, "the waiting calls queued")


async def test_a_create_waits_for_the_room_of_instances_being_removed() -> None:
    a = admission()
    grant = await a.admit("t", TERMINAL, 8)
    for i in range(8):
        hold(a, grant, f"i{i}")
    a.retiring("i0")  # a delete just before: its container is still being removed
    waiting = asyncio.create_task(a.admit("t", TERMINAL, 1))  # no wait_s asked
    await _until(lambda: len(a.waiting()) == 1)
    a.ended("i0")
    hold(a, await asyncio.wait_for(waiting, 5), "new")
    with pytest.raises(CapacityExhausted):
        await a.admit("t", TERMINAL, 1)  # nothing being removed: refused at once


async def test_a_deleted_sandbox_no_longer_counts_against_its_tenants_quota() -> None:
    a = admission(QuotaBook(default=Quota(max_sandboxes=1)))
    grant = await a.admit("t", TERMINAL, 1)
    hold(a, grant, "old", tenant="t")
    a.retiring("old")  # deleted: its container is still being removed
    (await a.admit("t", TERMINAL, 1)).close()
    assert a.ledger.held.memory_mb == pytest.approx(32), "the host still counts it until it is gone"


async def test_a_warm_instance_another_replica_started_is_counted_when_claimed_here() -> None:
    a = admission()
    a.claimed("theirs", TERMINAL, tenant="t", sandbox="sb-theirs")
    assert a.ledger.held.memory_mb == pytest.approx(32) and a.ledger.tenant("t").count == 1


async def test_a_waiter_held_by_its_quota_does_not_stop_pools_refilling() -> None:
    a = admission(QuotaBook({"q": Quota(max_sandboxes=1)}))
    hold(a, await a.admit("q", TERMINAL, 1), "q0", tenant="q")
    blocked = asyncio.create_task(a.admit("q", TERMINAL, 1, wait_s=30))
    await _until(lambda: len(a.waiting()) == 1)
    assert a.may_warm(TERMINAL)
    blocked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await blocked
