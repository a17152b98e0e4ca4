"""Leader election on Kubernetes with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

The Lease names its ``holderIdentity`` (the replica), ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and
``leaseTransitions``. A replica takes the Lease when nobody holds it or when it has expired: when the record has not
changed for ``leaseDurationSeconds`` of this replica's own clock since it first saw it (the other replicas' clocks
are never compared with this one's, so clock skew does not shorten a lease). The holder renews it every third of its
duration. Every write is an update carrying the ``resourceVersion`` read: if another replica wrote in between, the
API server answers 409 Conflict and the write is lost — that is the fencing: of two replicas that both think the
Lease expired, exactly one's update succeeds, and a stale leader's renewal fails instead of overwriting the new
leader's. Giving up (``release``) empties ``holderIdentity`` so the next replica need not wait out the duration.

The interface is the one ``sandbox.service.lifecycle`` expects of an elector: ``acquire`` (take or keep; whether this
replica leads), ``release``, ``holder``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from sandbox.backends.kubernetes.api import KubeApi
from sandbox.errors import FailedPrecondition, NotFound

LEASE_NAME = "sandbox-leader"


def _now_micro() -> str:
    """A MicroTime, as the API server writes it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        connect: Callable[[], Awaitable[KubeApi]],
        namespace: str,
        identity: str,
        *,
        duration_s: float,
        name: str = LEASE_NAME,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connect = connect
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.identity = identity
        self.duration_s = max(1, math.ceil(duration_s))
        self._clock = clock
        self._lease: dict[str, Any] | None = None
        """The Lease as last read or written."""
        self._observed_at = 0.0
        """When (this replica's clock) the record last changed as seen from here."""
        self._renewed_at: float | None = None
        """When this replica last wrote the Lease as its holder (None: it does not lead)."""

    @property
    def leading(self) -> bool:
        return self._renewed_at is not None and self._clock() - self._renewed_at < self.duration_s

    async def acquire(self) -> bool:
        """Take the Lease, or renew it while holding it; whether this replica leads now."""
        now = self._clock()
        if self._renewed_at is not None and now - self._renewed_at < self.duration_s / 3:
            return True
        api = await self._connect()
        renewing = self._renewed_at is not None and self._lease is not None
        if renewing and self._lease is not None and await self._write(api, self._lease, transition=False):
            return True  # renewed with the version written last: no read needed
        lease = await self._read(api)
        if lease is None:
            return await self._create(api)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expired = self._clock() - self._observed_at >= float(spec.get("leaseDurationSeconds") or self.duration_s)
        if holder and holder != self.identity and not expired:
            self._renewed_at = None
            return False
        return await self._write(api, lease, transition=holder != self.identity)

    async def holder(self) -> str | None:
        """Who holds the Lease now (None: nobody, or it expired)."""
        api = await self._connect()
        lease = await self._read(api)
        if lease is None:
            return None
        spec = lease.get("spec") or {}
        expired = self._clock() - self._observed_at >= float(spec.get("leaseDurationSeconds") or self.duration_s)
        return None if expired else (spec.get("holderIdentity") or None)

    async def release(self) -> None:
        """Give the Lease up (only if still this replica's): the next replica takes it at once."""
        if self._renewed_at is None or self._lease is None:
            return
        self._renewed_at = None
        api = await self._connect()
        lease = dict(self._lease)
        lease["spec"] = {**(lease.get("spec") or {}), "holderIdentity": None, "leaseDurationSeconds": 1,
                         "renewTime": _now_micro()}  # fmt: skip
        with contextlib.suppress(FailedPrecondition, NotFound):  # someone else holds it already
            await api.call("PUT", f"{self.path}/{self.name}", what="release the leader Lease", body=lease)

    async def _read(self, api: KubeApi) -> dict[str, Any] | None:
        try:
            lease = await api.get(f"{self.path}/{self.name}", what="read the leader Lease")
        except NotFound:
            self._lease = None
            return None
        before = (self._lease or {}).get("metadata", {}).get("resourceVersion")
        if lease.get("metadata", {}).get("resourceVersion") != before:
            self._observed_at = self._clock()  # the record changed: its duration counts from now
        self._lease = lease
        return lease

    async def _create(self, api: KubeApi) -> bool:
        now = _now_micro()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name},
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration_s, "acquireTime": now,
                     "renewTime": now, "leaseTransitions": 0},
        }  # fmt: skip
        try:
            self._lease = await api.create(self.path, body, what="create the leader Lease")
        except FailedPrecondition:  # another replica made it first
            return False
        self._observed_at = self._renewed_at = self._clock()
        return True

    async def _write(self, api: KubeApi, lease: dict[str, Any], *, transition: bool) -> bool:
        """Update the Lease as its holder, with the resourceVersion read: a conflict means another replica wrote
        first (it leads, or took over), and this one does not lead."""
        spec = dict(lease.get("spec") or {})
        now = _now_micro()
        if transition:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if spec.get("holderIdentity") else 0)
            spec["acquireTime"] = now
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration_s, renewTime=now)
        body = {**lease, "spec": spec}
        try:
            self._lease = await api.call("PUT", f"{self.path}/{self.name}", what="renew the leader Lease", body=body)
        except (FailedPrecondition, NotFound):
            self._renewed_at = None
            return False
        self._observed_at = self._renewed_at = self._clock()
        return True
