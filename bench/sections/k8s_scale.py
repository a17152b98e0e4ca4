"""k8s-scale: the control plane over the Kubernetes backend at fleet size, by simulation (as agent-sandbox does with
kwok). No cluster: the fake API server (sandbox.testing.fake_kube) runs in a child process in mode "simulate",
``k8s_pods`` pods over ``k8s_nodes`` simulated nodes, never realized.

What is real: the control plane, in this process (SandboxService, Lifecycle, KubernetesBackend, the operator, an
in-memory store), talking HTTP to the fake server through the kubernetes_asyncio client exactly as to a cluster
(LIST, watch, create, merge patch, delete), and TCP to each pod's agent with the pod's own token. What is
simulated: the kubelets (a pod is Running on its node the moment it is bound), the nodes, and the agents: one
server on 127.0.0.1 answers hello (only with the token of a pod's Secret), ping and health for every simulated
pod (sim_agent.py); nothing runs in a pod, so no step is timed here.

Timed, once the fleet holds ``k8s_pods`` pods (``k8s_claims`` of them warm in a pool, the rest serving sandboxes):
(a) a reconcile pass and a health pass of the lifecycle, (b) a list of the instances, (c) a burst of ``k8s_claims``
creates at once, all served from the warm pool, (d) a node lost with its pods until every affected sandbox is
marked unhealthy or replaced (half the sandboxes have ``auto_recover``), with the lifecycle and the operator running
as in the server, and until the Sandbox objects show it; and the operator's first mirror of the fleet into Sandbox
objects and a pass with nothing changed. RSS: this process (the control plane) and the child (the fake server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from bench import BenchError
from bench.harness import Bench, SectionResult
from bench.machine import MIB, rss
from bench.report import Row
from bench.stats import Summary, Value
from sandbox.backends.kubernetes.backend import KubernetesBackend
from sandbox.backends.kubernetes.config import KubernetesConfig
from sandbox.errors import SandboxError
from sandbox.models import Resources, SandboxSpec, SandboxState
from sandbox.operator.operator import Operator
from sandbox.operator.settings import OperatorSettings
from sandbox.service import Principal, SandboxService
from sandbox.service.lifecycle import Lifecycle, LifecycleSettings
from sandbox.service.records import SANDBOXES, SandboxRecord
from sandbox.store import EmbeddedStore

NAME = "k8s-scale"
NAMESPACE = "sandboxes"
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "sandbox" / "crds"
CONCURRENCY = 64
"""Creates at once while the fleet is built (the burst of claims is all at once)."""
WARM = SandboxSpec(kind="terminal")
HELD = SandboxSpec(kind="terminal", resources=Resources(cpus=0.5))
"""Another pool key than WARM's: the held sandboxes are started cold, not taken from the warm pool."""
ALICE = Principal("alice")
_log = logging.getLogger("bench.k8s")


# ---------------------------------------------------------------------------------------------------- the child


def _serve(conn: Connection, owner: str, nodes: int) -> None:
    """The fake API server, in a process of its own: commands in, answers out, until "close"."""
    from sandbox.testing.fake_kube import FakeKube

    kube = FakeKube(mode="simulate", owner=owner, namespaces=(NAMESPACE,), nodes=nodes, agents=True)
    kube.start()
    try:
        conn.send((kube.kubeconfig, kube.agent_port, os.getpid()))
        while True:
            command, arg = conn.recv()
            if command == "close":
                return
            if command == "crds":
                store = kube.store
                assert store is not None
                for crd in arg:
                    kube.run(store.create, "customresourcedefinitions", "", crd)
                conn.send(None)
            elif command == "lose_node":
                kube.run(kube.lose_node, arg)
                conn.send(None)
            else:
                conn.send(ValueError(f"unknown command {command!r}"))
    finally:
        kube.close()
        conn.close()


class FakeServer:
    """The child process and its pipe. Every call blocks: run them through ``asyncio.to_thread``."""

    def __init__(self, owner: str, nodes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, owner, nodes), name="fake-kube", daemon=True)
        self.process.start()
        child.close()
        if not self.conn.poll(60):
            self.close()
            raise BenchError("the fake API server did not start within 60 s")
        self.kubeconfig, self.agent_port, self.pid = self._recv()

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join(10)
            raise BenchError(f"the fake API server's process ended (exit code {self.process.exitcode})") from None

    def ask(self, command: str, arg: Any = None) -> Any:
        self.conn.send((command, arg))
        answer = self._recv()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(("close", None))
            self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)
        self.conn.close()


# ---------------------------------------------------------------------------------------------------- measuring


async def _timed_all(calls: list[Any], concurrency: int) -> tuple[list[float], list[Any], float]:
    """Run the coroutines ``concurrency`` at a time; (each one's latency, results, wall time)."""
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(call: Any) -> Any:
        async with gate:
            started = time.perf_counter()
            result = await call
            latencies.append(time.perf_counter() - started)
            return result

    started = time.perf_counter()
    results = await asyncio.gather(*(one(c) for c in calls))
    return latencies, list(results), time.perf_counter() - started


async def _passes(call: Any, n: int) -> tuple[list[float], float]:
    """``n`` calls one after the other: their latencies, and this process's CPU seconds per call (the control
    plane's own work, without the fake API server's)."""
    samples = []
    cpu = time.process_time()
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples, (time.process_time() - cpu) / n


class Scale:
    def __init__(self, bench: Bench, server: FakeServer, workdir: str) -> None:
        options = bench.options
        self.bench, self.server = bench, server
        self.pods, self.nodes, self.claims = options.k8s_pods, options.k8s_nodes, options.k8s_claims
        self.samples = options.k8s_samples
        config = KubernetesConfig(
            kubeconfig=server.kubeconfig, owner=bench.owner, namespace=NAMESPACE, agent_port=server.agent_port,
            ready_timeout_s=120, api_timeout_s=120, snapshot_dir=os.path.join(workdir, "snapshots"),
        )  # fmt: skip
        self.backend = KubernetesBackend(config)
        self.rows: list[Row] = []
        self.details: dict[str, Any] = {"pods": self.pods, "nodes": self.nodes, "claims": self.claims}

    def row(self, name: str, metric: Summary | Value, note: str = "") -> None:
        self.rows.append(Row(NAME, name, metric, note=note))

    async def run(self) -> None:
        store = await EmbeddedStore.open(None, logger=_log)
        service = SandboxService(self.backend, store, logger=_log)
        await service.start()
        lifecycle = Lifecycle(service, LifecycleSettings(), logger=_log)
        operator = Operator(service, lifecycle, self.backend, settings=OperatorSettings(), logger=_log)
        try:
            await lifecycle.tick()  # this replica leads (the fleet is empty: the tick costs nothing)
            await self._fill(service)
            await self._passes(service, lifecycle)
            await self._burst(service)
            without = rss(os.getpid())
            await self._mirror(operator)
            await self._node_lost(service, lifecycle, operator)
            self.row("control-plane RSS, before the operator ran", Value(round(without / MIB, 1), "MiB", n=self.pods),
                     note="this process: service, lifecycle, backend (a pooled agent connection per sandbox), "
                     "in-memory store; the fake API server runs in a child process")  # fmt: skip
            self.row("control-plane RSS, with the operator", Value(round(rss(os.getpid()) / MIB, 1), "MiB",
                     n=self.pods), note="+ its caches: every Sandbox object and pod as last seen")  # fmt: skip
            child = await asyncio.to_thread(rss, self.server.pid)
            self.row("fake API server RSS (simulated cluster)", Value(round(child / MIB, 1), "MiB", n=self.pods))
        finally:
            # Nothing to delete: the store is in memory and the simulated cluster goes with its process.
            await operator.close()
            await lifecycle.stop()
            await service.close()
            await store.close()

    async def _fill(self, service: SandboxService) -> None:
        """``claims`` warm instances in a pool, then sandboxes up to ``pods`` pods, every one through the backend."""
        progress = self.bench.progress
        key = service.pools.add(WARM, self.backend.image_for(WARM), min=self.claims, max=self.claims,
                                max_starting=CONCURRENCY)  # fmt: skip
        started = time.perf_counter()
        while (ready := len(await service.store.items(key))) < self.claims:
            await service.pools.refill()
            progress.count("k8s-scale: warm pool", ready, self.claims)
            await asyncio.sleep(0.2)
        filled = time.perf_counter() - started
        self.row("warm pool filled (pods started)", Value(round(self.claims / filled, 1), "pods/s", n=self.claims))
        self.key = key  # kept (reconciliation keeps its queue), but nothing refills it: the lifecycle loop is not run
        held = self.pods - self.claims
        specs = [HELD.model_copy(update={"auto_recover": i % 2 == 0}) for i in range(held)]
        progress.say(f"k8s-scale: creating {held} sandboxes, {CONCURRENCY} at a time")
        latencies, _, wall = await _timed_all([service.create(ALICE, s) for s in specs], CONCURRENCY)
        self.row(f"create {held} sandboxes, cold, {CONCURRENCY} at once", Summary.of(latencies),
                 note=f"{held / wall:.0f} creates/s; each: secret, pod, watch until Running, agent hello and "
                 "health over TCP, claim annotation")  # fmt: skip

    async def _passes(self, service: SandboxService, lifecycle: Lifecycle) -> None:
        n, progress = self.samples, self.bench.progress
        progress.say(f"k8s-scale: timing passes over {self.pods} pods")
        listed, cpu = await _passes(self.backend.list_instances, n)
        if len(await self.backend.list_instances()) != self.pods:
            raise BenchError(f"the backend lists {len(await self.backend.list_instances())} pods, not {self.pods}")
        self.row(f"list instances ({self.pods} pods)", Summary.of(listed),
                 note=f"control-plane CPU {cpu:.2f} s a list (decoding the pod list); the rest is the fake API "
                 "server building it")  # fmt: skip
        reconciled, cpu = await _passes(lifecycle.reconcile, n)
        self.row("lifecycle reconcile pass", Summary.of(reconciled),
                 note=f"control-plane CPU {cpu:.2f} s; store vs engine: the instance records, the pool queues, two "
                 "LISTs of the pods (one for the instances, one for the snapshots' references)")  # fmt: skip
        probed, cpu = await _passes(lifecycle.check_health, n)
        self.row("lifecycle health pass", Summary.of(probed),
                 note=f"control-plane CPU {cpu:.2f} s; one LIST, then a deep probe of each of the "
                 f"{self.pods - self.claims} sandboxes' agents over TCP, 16 at a time (the simulated agent "
                 "answers)")  # fmt: skip

    async def _burst(self, service: SandboxService) -> None:
        warm = set(await service.store.items(self.key))
        before = len(await self.backend.list_instances())
        latencies, infos, wall = await _timed_all([service.create(ALICE, WARM) for _ in range(self.claims)],
                                                  self.claims)  # fmt: skip
        records = [await service.records.read(i.id) for i in infos]
        from_pool = sum(1 for r in records if r is not None and r.instance in warm)
        after = len(await self.backend.list_instances())
        if from_pool != self.claims or after != before:
            raise BenchError(f"{from_pool}/{self.claims} claims came from the pool; pods {before} -> {after}")
        service.pools.remove(self.key)  # empty now; the lifecycle loop that runs next must not refill it
        self.row(f"burst of {self.claims} creates from a warm pool, all at once", Summary.of(latencies),
                 note=f"{self.claims / wall:.0f} claims/s; every one a warm pod, no pod started")  # fmt: skip

    async def _mirror(self, operator: Operator) -> None:
        """The operator's first pass (every sandbox mirrored into a Sandbox object), then one with nothing to do."""
        crds = [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("sandbox*.yaml"))]
        await asyncio.to_thread(self.server.ask, "crds", crds)
        started = time.perf_counter()
        await operator.tick()
        first = time.perf_counter() - started
        writes = dict(operator.mirror.writes)
        self.row(f"operator: first mirror of {self.pods} Sandbox objects", Value(round(first, 2), "s", n=self.pods),
                 note=f"writes: {writes.get('create', 0)} creates + {writes.get('status', 0)} status "
                 f"(at most {operator.settings.write_concurrency} at once)")  # fmt: skip
        steady, cpu = await _passes(operator.tick, self.samples)
        extra = sum(operator.mirror.writes.values()) - sum(writes.values())
        self.row("operator: pass with nothing changed", Summary.of(steady),
                 note=f"{extra} writes in {self.samples} passes over {self.pods} records; CPU {cpu:.2f} s "
                 "a pass")  # fmt: skip
        self.details["operator_writes"] = dict(operator.mirror.writes)

    async def _node_lost(self, service: SandboxService, lifecycle: Lifecycle, operator: Operator) -> None:
        node = f"sim-node-{self.nodes // 2}"
        pods = {p["metadata"]["name"] for p in (await self.backend._owned_pods()) if p["spec"].get("nodeName") == node}
        records = [SandboxRecord.model_validate(d) for d in (await service.store.all(SANDBOXES)).values()]
        hit = {r.id: r.instance for r in records if self.backend.pod_name(r.instance) in pods}
        loops = [asyncio.create_task(lifecycle.run()), asyncio.create_task(operator.run())]
        try:
            await asyncio.sleep(2 * LifecycleSettings().health_interval_s)  # the loops in their stride
            started = time.perf_counter()
            await asyncio.to_thread(self.server.ask, "lose_node", node)
            handled = await self._until(lambda: self._handled(service, hit), "marked or replaced")
            shown = await self._until(lambda: self._shown(operator, hit), "shown in the Sandbox objects")
        finally:
            for task in loops:
                task.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        done = await self._handled(service, hit, count=True)
        self.details["node_lost"] = {"node": node, "pods": len(pods), "sandboxes": len(hit), **done}
        self.row(f"node lost ({len(pods)} pods) -> every sandbox marked or replaced",
                 Value(round(handled - started, 2), "s", n=len(hit)),
                 note=f"{done['replaced']} replaced (auto_recover), {done['marked']} marked unhealthy; the lifecycle "
                 "loop running with its defaults (health pass every 2 s)")  # fmt: skip
        self.row("node lost -> their Sandbox objects show it", Value(round(shown - started, 2), "s", n=len(hit)))

    async def _until(self, check: Any, what: str, timeout: float = 300) -> float:
        give_up = time.perf_counter() + timeout
        while not await check():
            if time.perf_counter() > give_up:
                raise BenchError(f"node lost: not every sandbox {what} within {timeout:g} s")
            await asyncio.sleep(0.05)
        return time.perf_counter()

    async def _handled(self, service: SandboxService, hit: dict[str, str], count: bool = False) -> Any:
        marked = replaced = 0
        for sandbox_id, instance in hit.items():
            record = await service.records.read(sandbox_id)
            if record is not None and record.instance != instance and record.state is SandboxState.RUNNING:
                replaced += 1
            elif record is not None and record.state is SandboxState.UNHEALTHY:
                marked += 1
        if count:
            return {"marked": marked, "replaced": replaced}
        return marked + replaced == len(hit)

    async def _shown(self, operator: Operator, hit: dict[str, str]) -> bool:
        objects = operator.mirror.objects.cache if operator.mirror.objects is not None else {}
        for sandbox_id, instance in hit.items():
            status = (objects.get(sandbox_id) or {}).get("status") or {}
            moved = status.get("pod") not in (None, self.backend.pod_name(instance))
            if not (status.get("state") == "unhealthy" or (moved and status.get("health") == "Healthy")):
                return False
        return True


class _Counter(logging.Handler):
    """Counts the control plane's warnings by message (they would flood the bench's output: 100 failing pods ...)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.seen[f"{record.name}: {record.msg}"] += 1


async def run(bench: Bench) -> SectionResult:
    counter, quiet = _Counter(), [logging.getLogger("sandbox"), _log]
    saved = [(logger, logger.propagate, list(logger.handlers)) for logger in quiet]
    for logger in quiet:
        logger.propagate, logger.handlers = False, [counter]
    try:
        result = await _run(bench)
    finally:
        for logger, propagate, handlers in saved:
            logger.propagate, logger.handlers = propagate, handlers
    result.details["control_plane_warnings"] = dict(counter.seen.most_common(10))
    return result


async def _run(bench: Bench) -> SectionResult:
    options = bench.options
    workdir = tempfile.mkdtemp(prefix="k8s-scale-", dir=bench.workdir)
    bench.progress.say(f"k8s-scale: fake API server (simulate) with {options.k8s_nodes} nodes, in a child process")
    server = await asyncio.to_thread(FakeServer, bench.owner, options.k8s_nodes)
    scale = Scale(bench, server, workdir)
    try:
        await scale.run()
    except SandboxError as e:
        raise BenchError(f"k8s-scale: {e.message}") from e
    finally:
        await asyncio.to_thread(server.close)
    return SectionResult(scale.rows, scale.details)
