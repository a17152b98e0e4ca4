"""A control plane with a fleet of fake sandboxes, for the web view's fleet-scale tests and benchmarks.

``python -m sandbox.testing.fleet --http-port P --tokens-file F --socket-root R --sandboxes 300 --ready-file J``
serves the REST API and the web view over the fake backend, with every instance served by one shared agent process
(``SharedAgentBackend``: hundreds of sandboxes for the price of one process), after creating the fleet: terminals,
desktops and browsers (listed with a display, but a terminal agent with no screen runs them) of two tenants, with
labels, a few episodes' task ids, a few failed ones and some command output. ``J`` then says what it made. No
lifecycle runs (nothing expires, no health rounds): what the server's CPU does is what its clients ask.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from sandbox.api.rest import create_app
from sandbox.backends.agent_client import AgentClient
from sandbox.models import Exec, SandboxKind, SandboxSpec
from sandbox.protocol import AGENT_SOCKET_NAME
from sandbox.service import Principal, SandboxService, TokenRegistry
from sandbox.service.records import SANDBOXES, SandboxRecord
from sandbox.store import EmbeddedStore
from sandbox.testing.fake_backend import FakeBackend, FakeConfig, _Proc

SHARED = "shared"
KINDS = (SandboxKind.TERMINAL, SandboxKind.TERMINAL, SandboxKind.DESKTOP, SandboxKind.TERMINAL, SandboxKind.BROWSER)


class SharedAgentBackend(FakeBackend):
    """The fake backend with one agent process for every instance (they share its workspace, and cannot fail
    alone); desktop and browser specs run on it too, with no screen (a screenshot fails)."""

    def __init__(self, config: FakeConfig) -> None:
        super().__init__(config)
        self._shared: asyncio.subprocess.Process | None = None
        self._shared_lock = asyncio.Lock()

    async def create(self, instance_id: str, spec: SandboxSpec, **options: Any) -> Any:
        if spec.kind not in (SandboxKind.DESKTOP, SandboxKind.BROWSER):
            return await super().create(instance_id, spec, **options)
        await super().create(instance_id, spec.model_copy(update={"kind": SandboxKind.TERMINAL}), **options)
        self._procs[instance_id].spec = spec
        return await self.inspect(instance_id)

    async def _spawn(self, instance_id: str, spec: SandboxSpec) -> asyncio.subprocess.Process:
        async with self._shared_lock:
            if self._shared is None or self._shared.returncode is not None:
                await asyncio.to_thread(os.makedirs, os.path.join(self._dir(SHARED), "workspace"), exist_ok=True)
                self._shared = await super()._spawn(SHARED, spec.model_copy(update={"kind": SandboxKind.TERMINAL}))
            return self._shared

    async def _kill(self, proc: _Proc) -> None:
        if proc.process is not self._shared:  # it serves the others too: close() ends it
            await super()._kill(proc)

    def _connect_agent(self, instance_id: str) -> AgentClient:
        path = os.path.join(self._dir(SHARED), AGENT_SOCKET_NAME)
        return AgentClient(path, label=f"fake instance {instance_id} (shared agent)")

    async def close(self) -> None:
        await super().close()
        if self._shared is not None:
            shared, self._shared = self._shared, None
            await super()._kill(_Proc(shared, SandboxSpec(kind=SandboxKind.TERMINAL), 0.0, None))
            await asyncio.to_thread(shutil.rmtree, self._dir(SHARED), True)


async def populate(service: SandboxService, count: int, *, concurrency: int = 8) -> dict[str, Any]:
    """``count`` sandboxes: every 15th of tenant beta, the rest alpha's; every 25th failed, every 20th with a task."""
    gate = asyncio.Semaphore(concurrency)
    made: list[tuple[int, str, SandboxKind]] = []

    async def one(i: int) -> None:
        tenant = "beta" if i % 15 == 14 else "alpha"
        kind = KINDS[i % len(KINDS)]
        labels = {"run": f"run-{i // 50}", "worker": f"w{i:04d}"}
        async with gate:
            info = await service.create(Principal(tenant), SandboxSpec(kind=kind, labels=labels))
        made.append((i, info.id, kind))

    await asyncio.gather(*(one(i) for i in range(count)))
    made.sort()
    failed, tasks, outputs = [], {}, {}
    for i, sandbox_id, kind in made:
        doc = await service.store.get(SANDBOXES, sandbox_id)
        assert doc is not None
        if i % 20 == 7:
            task = f"task-{i:04d}-checkout"
            doc["episode"] = {
                "task_id": task, "digest": "0" * 64, "task_hash": "0" * 64, "trajectory_id": f"traj-{i}",
                "started_at": doc["created_at"],
            }  # fmt: skip
            await service.store.put(SANDBOXES, sandbox_id, doc)
            tasks[sandbox_id] = task
        if i % 25 == 3:
            await service.mark_failed(
                SandboxRecord.model_validate(doc), f"fleet fixture {i} failed", cause="probe_failed"
            )
            failed.append(sandbox_id)
        elif kind is SandboxKind.TERMINAL and i % 10 == 0:
            tenant = str(doc["tenant"])
            await service.exec(Principal(tenant), sandbox_id, Exec(cmd=f"for n in 1 2 3; do echo out-{i}-$n; done"))
            outputs[sandbox_id] = f"out-{i}-3"
    return {
        "ids": [sandbox_id for _, sandbox_id, _ in made],
        "tenants": {sid: ("beta" if i % 15 == 14 else "alpha") for i, sid, _ in made},
        "kinds": {sid: kind.value for _, sid, kind in made},
        "failed": failed,
        "tasks": tasks,
        "outputs": outputs,
    }


async def serve(args: argparse.Namespace, tokens: TokenRegistry) -> None:
    import uvicorn

    logger = logging.getLogger("sandbox.fleet")
    store = await EmbeddedStore.open(None, logger=logger)
    backend = SharedAgentBackend(FakeConfig(socket_root=args.socket_root))
    service = SandboxService(backend, store, logger=logger)
    try:
        made = await populate(service, args.sandboxes)
        app = create_app(service, tokens, logger=logger)
        config = uvicorn.Config(app, host="127.0.0.1", port=args.http_port, log_level="warning", lifespan="off")
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn offers no started event
            await asyncio.sleep(0.02)
        await asyncio.to_thread(Path(args.ready_file).write_text, json.dumps(made))
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        server.should_exit = True
        with contextlib.suppress(Exception):
            await task
    finally:
        await service.close()
        await backend.close()
        await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.testing.fleet", description=__doc__)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--tokens-file", required=True)
    parser.add_argument("--socket-root", required=True)
    parser.add_argument("--sandboxes", type=int, default=300)
    parser.add_argument("--ready-file", required=True)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = parser.parse_args(argv)
    asyncio.run(serve(args, TokenRegistry.from_mapping(json.loads(Path(args.tokens_file).read_text()))))


if __name__ == "__main__":
    main()
