"""The tasks of running episodes, kept in the store for whichever replica evaluates them.

A task's document goes under the hash of all of it (tasks that share a setup, and so a post-setup snapshot, may
differ in their evaluators). The files its downloads fetch that the server's own fixtures do not have (those a
client sent along, or those beside a task file loaded in-process) are kept too, once per content, so that an
evaluation's ``cloud_file`` getters and ``postconfig`` downloads find what the setup found.
"""

from __future__ import annotations

import base64
import hashlib
import json

from sandbox.service.records import FIXTURES, TASKS, snapshot_key
from sandbox.service.task_config import SentFixtures
from sandbox.store import Store
from sandbox.tasks.model import Task
from sandbox.tasks.runtime import Fixtures


async def keep_task(store: Store, tenant: str, task: Task, fixtures: Fixtures, server: Fixtures) -> str:
    """Keep ``task`` (with what ``fixtures`` has beyond ``server``'s); the hash it is kept under."""
    kept: dict[str, str] = {}
    for url in task.download_urls():
        data = fixtures.get(url)
        if data is None or server.get(url) == data:
            continue
        sha = hashlib.sha256(data).hexdigest()
        await store.put_if_absent(FIXTURES, snapshot_key(tenant, sha), {"data": base64.b64encode(data).decode()})
        kept[url] = sha
    document = {"task": task.to_dict(), "fixtures": kept}
    task_hash = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    await store.put_if_absent(TASKS, snapshot_key(tenant, task_hash), document)
    return task_hash


async def kept_task(store: Store, tenant: str, task_hash: str, server: Fixtures) -> Task | None:
    """The task kept under ``task_hash``, its fixtures those kept with it over ``server``'s; None if it is gone."""
    document = await store.get(TASKS, snapshot_key(tenant, task_hash))
    if document is None:
        return None
    sent: dict[str, bytes] = {}
    for url, sha in dict(document.get("fixtures") or {}).items():
        blob = await store.get(FIXTURES, snapshot_key(tenant, str(sha)))
        if blob is not None:
            sent[str(url)] = base64.b64decode(blob["data"])
    return Task.from_dict(document["task"], fixtures=SentFixtures(server, sent) if sent else server)
