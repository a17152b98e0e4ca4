"""The control plane survives kill -9 with sandboxes held, and two replicas share one Redis
without handing a warm sandbox out twice or over-creating containers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import docker
import pytest

from sandbox.backends.base import LABEL_OWNER
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.config import DockerConfig
from sandbox.client import AsyncClient, AsyncSandbox
from sandbox.models import SandboxSpec
from sandbox.service.records import CREATED_COUNTER, pool_key
from sandbox.store import RedisStore
from tests import redis_server as redis_fixtures
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, owned_by, require_image
from tests.docker.servers import ServerProcess
from tests.polling import eventually

pytestmark = pytest.mark.docker
redis_server = redis_fixtures.redis_server

# A create in flight is protected by the grace; it must outlast a create under load.
FAST_LIFECYCLE = {"tick_s": 0.2, "health_interval_s": 1.0, "reconcile_interval_s": 1.0, "orphan_grace_s": 10}


def _containers(docker_client: docker.DockerClient, owner: str) -> list[str]:
    filters = {"label": f"{LABEL_OWNER}={owner}"}
    return [c["Labels"]["sandbox.instance"] for c in docker_client.api.containers(all=True, filters=filters)]


async def test_kill_9_with_50_sandboxes_held(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    require_image(docker_client, "terminal")
    owner = f"{OWNER}-k9"
    socket_root = f"/run/sbx-test-{RUN_ID}-k9"
    state = tmp_path / "state.json"
    settings = {"lifecycle": FAST_LIFECYCLE}
    first, second = (
        ServerProcess(tmp_path, owner=owner, socket_root=socket_root, name=name, state=state, settings=settings)
        for name in ("first", "second")
    )
    with owned_by(docker_client, owner, socket_root):
        first.start()
        try:
            async with AsyncClient(first.grpc_target) as client:
                limit = asyncio.Semaphore(8)

                async def hold(i: int) -> str:
                    async with limit:
                        sandbox = await client.create(kind="terminal", labels=TEST_LABEL)
                        await sandbox.files.write("/workspace/who", f"{sandbox.id}:{i}")
                        return sandbox.id

                held = await asyncio.gather(*(hold(i) for i in range(50)))
        finally:
            first.kill9()

        # A container with this control plane's labels that no record knows of: an orphan.
        stray = DockerBackend(DockerConfig(owner=owner, socket_root=socket_root))
        await stray.create("orphan-1", SandboxSpec(kind="terminal"))
        await stray.close()

        second.start()
        try:
            async with AsyncClient(second.grpc_target) as client:
                sandboxes = [await client.get(sandbox_id) for sandbox_id in held]
                contents = await asyncio.gather(*(sb.files.read("/workspace/who") for sb in sandboxes))
                assert [c.decode().split(":")[0] for c in contents] == held
                results = await asyncio.gather(*(sb.exec("echo ok") for sb in sandboxes))
                assert all(r.stdout == "ok\n" for r in results)
                await eventually(
                    lambda: "orphan-1" not in _containers(docker_client, owner), 30, "the orphan's removal"
                )
                await asyncio.gather(*(sb.close() for sb in sandboxes))
            await eventually(
                lambda: asyncio.to_thread(lambda: not _containers(docker_client, owner)),
                60,
                "the removal of every container",
            )
        finally:
            second.stop()


async def test_two_replicas_on_one_redis(
    docker_client: docker.DockerClient, redis_server: redis_fixtures.RedisServer, tmp_path: Path
) -> None:
    require_image(docker_client, "terminal")
    owner = f"{OWNER}-rr"
    socket_root = f"/run/sbx-test-{RUN_ID}-rr"
    spec = {"kind": "terminal", "resources": {"cpus": 0.25, "memory_mb": 256}}
    settings = {"lifecycle": FAST_LIFECYCLE, "pools": [{"spec": spec, "min": 5, "max": 10, "max_starting": 4}]}
    replicas = [
        ServerProcess(tmp_path, owner=owner, socket_root=socket_root, name=name, redis_url=redis_server.url,
                      settings=settings)
        for name in ("replica-a", "replica-b")
    ]  # fmt: skip
    import logging

    store = await RedisStore.open(redis_server.url, namespace=f"sandbox-{owner}", logger=logging.getLogger("t"))
    key = pool_key(SandboxSpec.model_validate(spec), "sandbox/terminal:latest")
    with owned_by(docker_client, owner, socket_root):
        try:
            for replica in replicas:
                replica.start()
            started = time.monotonic()
            while len(await store.items(key)) < 5:
                assert time.monotonic() - started < 60, "the warm pool never filled"
                await asyncio.sleep(0.2)
            warm_before = set(await store.items(key))

            async with AsyncClient(replicas[0].grpc_target) as a, AsyncClient(replicas[1].grpc_target) as b:

                async def acquire(i: int) -> tuple[str, str]:
                    client = (a, b)[i % 2]
                    sandbox: AsyncSandbox = await client.create(**spec, labels={**TEST_LABEL, "n": str(i)})
                    try:
                        record = await store.get("sandboxes", sandbox.id)
                        assert record is not None
                        claim = await sandbox.exec(f"echo {sandbox.id} >> /workspace/claims; cat /workspace/claims")
                        assert claim.stdout == f"{sandbox.id}\n", f"{sandbox.id} shares its container: {claim.stdout}"
                        return sandbox.id, str(record["instance"])
                    finally:
                        await sandbox.close()

                acquired = await asyncio.gather(*(acquire(i) for i in range(200)))
            ids, instances = zip(*acquired, strict=True)
            assert len(set(ids)) == 200 and len(set(instances)) == 200, "a sandbox was handed out twice"
            assert warm_before <= set(instances), "every warm sandbox is handed out"
            created = await store.counter(CREATED_COUNTER)
            assert created <= 200 + 10, f"{created} containers created for 200 acquires with a pool of at most 10"
        finally:
            for replica in replicas:
                replica.stop()
            await store.close()
