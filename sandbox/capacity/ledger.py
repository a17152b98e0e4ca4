"""Every instance's reservation: held by a sandbox, warm in a pool, or being started for one of them.

Totals are kept as entries come and go, so an admission decision costs the same with ten sandboxes or ten thousand.
The store's instance records carry each reservation too (``InstanceRecord.reserved``): ``resync`` rebuilds the
ledger from them after a restart and, on a store shared by replicas, takes in the others' instances.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox.capacity.usage import ZERO, Usage


@dataclass(frozen=True, slots=True)
class Entry:
    usage: Usage
    warm: bool
    tenant: str | None = None
    sandbox: str | None = None
    retiring: bool = False
    """Being removed: still reserved until it is gone, and soon free (a create may wait for it)."""


@dataclass
class TenantUsage:
    reserved: Usage = ZERO
    sandboxes: Counter[str] | None = None

    @property
    def count(self) -> int:
        return 0 if self.sandboxes is None else len(self.sandboxes)


class Ledger:
    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        self._added_at: dict[str, int] = {}
        self._released_at: dict[str, int] = {}
        self._seq = 0
        self.held = ZERO
        self.warm = ZERO
        self.retiring = ZERO
        """The part of held and warm being removed."""
        self.peak = ZERO
        """The most held and warm instances reserved at once, per resource (what a test holds capacity to)."""
        self._tenants: dict[str, TenantUsage] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, instance: str) -> bool:
        return instance in self._entries

    def get(self, instance: str) -> Entry | None:
        return self._entries.get(instance)

    def add(self, instance: str, entry: Entry) -> None:
        self._drop(instance)
        self._seq += 1
        self._entries[instance] = entry
        self._added_at[instance] = self._seq
        self._count(entry, +1)
        total = self.held + self.warm
        peak = self.peak
        self.peak = Usage(max(peak.cpus, total.cpus), max(peak.memory_mb, total.memory_mb), max(peak.pids, total.pids))

    def mark_retiring(self, instance: str) -> None:
        entry = self._entries.get(instance)
        if entry is not None and not entry.retiring:
            self.add(instance, Entry(entry.usage, entry.warm, entry.tenant, entry.sandbox, retiring=True))

    def claim(self, instance: str, usage: Usage, *, tenant: str, sandbox: str) -> None:
        """A warm instance now serves ``sandbox`` of ``tenant`` (one another replica started is counted at
        ``usage``, what its spec reserves)."""
        entry = self._entries.get(instance)
        self.add(instance, Entry(entry.usage if entry else usage, warm=False, tenant=tenant, sandbox=sandbox))

    def release(self, instance: str) -> Entry | None:
        self._seq += 1
        self._released_at[instance] = self._seq
        if len(self._released_at) > 4096:  # only releases during a resync's read matter
            self._released_at = dict(list(self._released_at.items())[-2048:])
        return self._drop(instance)

    def mark(self) -> int:
        """A point in the ledger's history, for ``resync``."""
        return self._seq

    def resync(self, stored: Iterable[tuple[str, Entry]], *, since: int) -> None:
        """Replace the entries with ``stored`` (read from the store after ``mark()`` returned ``since``), keeping
        what was added here after that and not bringing back what was released here after that."""
        fresh = dict(stored)
        for instance, seq in self._added_at.items():
            if seq > since and instance in self._entries:
                fresh[instance] = self._entries[instance]
        for instance, seq in self._released_at.items():
            if seq > since and self._added_at.get(instance, 0) <= seq:
                fresh.pop(instance, None)
        self._entries.clear()
        self._added_at.clear()
        self.held = self.warm = self.retiring = ZERO
        self._tenants.clear()
        for instance, entry in fresh.items():
            self._seq += 1
            self._entries[instance] = entry
            self._added_at[instance] = self._seq
            self._count(entry, +1)

    def tenant(self, tenant: str) -> TenantUsage:
        return self._tenants.get(tenant) or TenantUsage()

    def tenants(self) -> dict[str, TenantUsage]:
        return dict(self._tenants)

    def warm_instances(self) -> list[str]:
        return [instance for instance, entry in self._entries.items() if entry.warm]

    def _drop(self, instance: str) -> Entry | None:
        entry = self._entries.pop(instance, None)
        self._added_at.pop(instance, None)
        if entry is not None:
            self._count(entry, -1)
        return entry

    def _count(self, entry: Entry, sign: int) -> None:
        usage = entry.usage if sign > 0 else ZERO - entry.usage
        if entry.retiring:
            self.retiring = self.retiring + usage
        if entry.warm:
            self.warm = self.warm + usage
            return
        self.held = self.held + usage
        if entry.tenant is None or entry.retiring:
            return  # a sandbox deleted (or an instance swapped out) no longer counts against its tenant
        tenant = self._tenants.setdefault(entry.tenant, TenantUsage(sandboxes=Counter()))
        tenant.reserved = tenant.reserved + usage
        assert tenant.sandboxes is not None
        if entry.sandbox is not None:
            tenant.sandboxes[entry.sandbox] += sign
            if tenant.sandboxes[entry.sandbox] <= 0:
                del tenant.sandboxes[entry.sandbox]
        if not tenant.sandboxes and tenant.reserved.memory_mb <= 1e-6:
            del self._tenants[entry.tenant]
