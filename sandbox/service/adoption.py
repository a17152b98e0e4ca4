"""Adopting sandboxes again after the store lost its data.

Many run Redis without persistence: a restart brings it back empty. Without care the control plane would
then take every container for an orphan and remove what clients hold. Instead a store carries an *epoch*
(``records.EPOCH``); the leader that finds it missing, or changed, stops reaping and rebuilds the records
from the engine: each held instance carries a claim (sandbox id, tenant, spec, lease end) and each snapshot
image its record. What carries no claim (warm instances, starts cut off) is left to reconciliation.
"""

from __future__ import annotations

import logging
import secrets
import time

from pydantic import ValidationError

from sandbox.service.records import (
    EPOCH,
    INSTANCES,
    META,
    SANDBOXES,
    SNAPSHOTS,
    InstanceRecord,
    InstanceState,
    SandboxRecord,
    SnapshotRecord,
    snapshot_key,
)
from sandbox.service.service import SandboxService


async def epoch_changed(service: SandboxService) -> bool:
    """True when the store's epoch is not the one this replica knows (lost, or re-made after a loss)."""
    doc = await service.store.get(META, EPOCH)
    return doc is None or str(doc.get("id")) != service.epoch


async def adopt(service: SandboxService, *, logger: logging.Logger) -> dict[str, int]:
    """Rebuild what the engine can tell of lost records, then mark the store with a (new) epoch.

    Idempotent, and harmless on a store that lost nothing: only missing records are written.
    Returns how many sandboxes, instances and snapshots were adopted."""
    store, backend = service.store, service.backend
    claims = await backend.claims()
    on_engine = {i.id: i for i in await backend.list_instances()}
    known_instances = set((await store.all(INSTANCES)).keys())
    sandboxes = {key: doc for key, doc in (await store.all(SANDBOXES)).items()}
    counts = {"sandboxes": 0, "instances": 0, "snapshots": 0}
    now = time.time()
    for instance, claim in claims.items():
        if instance not in on_engine or instance in known_instances:
            continue
        try:
            record = SandboxRecord.from_claim(claim, instance)
        except ValidationError as e:
            logger.warning("instance %s carries an unreadable claim (%s); left to reconciliation", instance, e)
            continue
        holder = sandboxes.get(record.id)
        if holder is None:
            if await store.put_if_version(SANDBOXES, record.id, record.model_dump(mode="json"), version=0):
                counts["sandboxes"] += 1
                sandboxes[record.id] = record.model_dump(mode="json")
                logger.warning(
                    "adopted sandbox %s on %s from the engine", record.id, instance, extra={"sandbox_id": record.id}
                )
        elif holder.get("instance") != instance:
            continue  # the sandbox has moved on to another instance: this one is an orphan
        serving = InstanceRecord(
            id=instance,
            state=InstanceState.SERVING,
            sandbox=record.id,
            created_at=on_engine[instance].created_at or now,
            since=now,
        )
        if await store.put_if_version(INSTANCES, instance, serving.model_dump(mode="json"), version=0):
            counts["instances"] += 1
    named = await store.all(SNAPSHOTS)
    for snapshot in await backend.list_snapshots():
        if snapshot.record is None:
            continue
        try:
            snap = SnapshotRecord.model_validate({**snapshot.record, "image": snapshot.ref})
        except ValidationError:
            continue
        key = snapshot_key(snap.tenant, snap.name)
        if key not in named and await store.put_if_absent(SNAPSHOTS, key, snap.model_dump(mode="json")):
            counts["snapshots"] += 1
    await store.put_if_absent(META, EPOCH, {"id": secrets.token_hex(8), "created_at": now})
    doc = await store.get(META, EPOCH)
    service.epoch = None if doc is None else str(doc.get("id"))
    return counts
