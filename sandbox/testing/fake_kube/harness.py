"""``FakeKube``: the fake API server running on 127.0.0.1 in a thread of its own, with a kubeconfig that points at
it and the controls tests and benchmarks need (lose a node, evict a pod, kill a container behind the API's back,
refuse a verb as RBAC would, set a ResourceQuota, limit the nodes' room)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TypeVar

import docker
import docker.errors
from aiohttp import web

from sandbox.testing.fake_kube.app import FakeApi
from sandbox.testing.fake_kube.custom import CRD_RESOURCE
from sandbox.testing.fake_kube.objects import ObjectStore, Validator
from sandbox.testing.fake_kube.realize import NODE, TEARDOWNS, Realizer
from sandbox.testing.fake_kube.scheduler import Scheduler
from sandbox.testing.fake_kube.sim_agent import SIMULATED_IP, SimAgent
from sandbox.testing.fake_kube.simulate import Simulator

T = TypeVar("T")
Mode = Literal["realize", "simulate"]


@dataclass(frozen=True)
class Realism:
    """What a real API server does that a test may not expect, each on or off. ``FakeKube.realism`` is the default of
    every new server: the k8s test suite turns all of it on (tests/k8s/conftest.py); the bench leaves it off but for
    managedFields, which are always there.

    - ``history_s``: watch history kept (then 410 Gone for a watch from an older version); None: 20,000 events;
    - ``bookmark_s``: quiet time before a bookmark to a watch that asked for them (the real server: ~60 s), and one
      before the watch's timeout ends it; None: never a bookmark;
    - ``throttle``: (qps, burst) of all clients together, past which requests get 429 with Retry-After;
    - ``pod_security``: the level the namespaces it creates enforce (``pod-security.kubernetes.io/enforce``);
    - ``eviction_s``: a lost node's pods are not Ready at once, evicted (deleted) after this (the real: 300 s).
    """

    history_s: float | None = None
    bookmark_s: float | None = 60.0
    throttle: tuple[float, int] | None = None
    pod_security: str | None = None
    eviction_s: float = 300.0


SUITE = Realism(history_s=10.0, bookmark_s=1.0, throttle=(400.0, 800), pod_security="restricted", eviction_s=1.0)
"""What the k8s test suite runs with: every behaviour on, its times short. The server's rate limit sits above what
two replicas' client-side limits let through together (``api_qps`` 200, ``api_burst`` 400 each), as an operator
sets them on a real cluster: a well-behaved control plane never meets a 429 here, however loaded the machine (a
burst of 300 creates and 300 deletes at once met one below it, and its fifth retry failed, now and then); the
429 path has tests of its own (test_rate_limit.py) that ask for it."""


class FakeKube:
    """A fake Kubernetes API server. ``start()`` and ``close()`` block (Docker calls, a thread): from async code,
    call them through ``asyncio.to_thread``. ``call`` runs a function on the server's own event loop."""

    realism = Realism()
    """The default of every new server (see Realism)."""

    def __init__(
        self,
        *,
        mode: Mode,
        owner: str,
        namespaces: tuple[str, ...] = ("sandboxes",),
        nodes: int = 3,
        token: str | None = None,
        restart_backoff_s: float = 1.0,
        agents: bool = False,
        validate: Validator | None = None,
        allocatable: dict[str, str] | None = None,
        realism: Realism | None = None,
    ) -> None:
        """``token``: the bearer token callers must send; "" for none (kubectl sends no token over plain HTTP).
        ``agents`` (mode "simulate"): simulated pods get the simulated agent's address (sim_agent.py), so the control
        plane's agent calls are answered. ``validate``: called with each custom object about to be stored; what it
        refuses (AssertionError, ValueError) is answered 422 (e.g. the CRD's schema, checked with jsonschema).
        ``allocatable``: each node's room, e.g. {"cpu": "2", "memory": "4Gi", "pods": "110"} (mode "realize" has one
        node): pods that do not fit stay Pending, unschedulable, until room frees (scheduler.py). None: unlimited,
        every pod placed at once."""
        self.mode = mode
        self.owner = owner
        self.namespaces = namespaces
        self.nodes = nodes
        self.token = token if token is not None else secrets.token_urlsafe(16)
        self.restart_backoff_s = restart_backoff_s
        self.agents = agents
        self.validate = validate
        self.allocatable = allocatable
        self.real = realism or FakeKube.realism
        self.scheduler: Scheduler | None = None
        self.sim_agent: SimAgent | None = None
        self.agent_port = 0
        """The simulated agent's port (``agents``): the ``agent_port`` of the backend's config."""
        self.harness_id = secrets.token_hex(4)
        self.labels = {"sandbox.managed-by": "sandbox", "sandbox.owner": owner, "fake-kube.harness": self.harness_id}
        """Every Docker object the harness makes carries these."""
        self.workdir = tempfile.mkdtemp(prefix=f"fake-kube-{self.harness_id}-")
        self.kubeconfig = os.path.join(self.workdir, "kubeconfig")
        self.network = f"fk-{owner}-{self.harness_id}"
        self.url = ""
        self.store: ObjectStore | None = None
        self.api: FakeApi | None = None
        self.kubelet: Realizer | Simulator | None = None
        self._docker: docker.DockerClient | None = None
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._failed: BaseException | None = None

    # ---------------------------------------------------------------- start and stop

    def start(self) -> FakeKube:
        if self.mode == "realize":
            self._docker = docker.from_env(timeout=120)
            self._docker.networks.create(self.network, driver="bridge", internal=True, labels=self.labels)
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), name="fake-kube", daemon=True)
        self._thread.start()
        ready.wait(30)
        if self._failed is not None or not self.url:
            self.close()
            raise RuntimeError(f"the fake API server did not start: {self._failed!r}")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token} if self.token else {}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": self.namespaces[0]}}
            ],
            "current-context": "fake",
        }
        with open(self.kubeconfig, "w") as f:
            json.dump(config, f)  # JSON is YAML
        return self

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._setup())
        except BaseException as e:
            self._failed = e
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._teardown())
            self._loop.close()
            ready.set()
            return
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()

    async def _setup(self) -> None:
        self.store = store = ObjectStore(history_s=self.real.history_s)
        store.validate = self.validate
        labels = {"pod-security.kubernetes.io/enforce": self.real.pod_security} if self.real.pod_security else {}
        for namespace in self.namespaces:
            store.create("namespaces", "", {"metadata": {"name": namespace, "labels": dict(labels)}})
        if self.mode == "realize":
            assert self._docker is not None
            self.kubelet = Realizer(
                store,
                self._docker,
                workdir=self.workdir,
                network=self.network,
                labels=self.labels,
                restart_backoff_s=self.restart_backoff_s,
            )
        else:
            if self.agents:
                self.sim_agent = SimAgent(store)
                self.agent_port = await self.sim_agent.start()
            address = SIMULATED_IP if self.agents else None
            self.kubelet = Simulator(store, nodes=self.nodes, address=address, eviction_s=self.real.eviction_s)
        self.kubelet.start()
        if self.allocatable is not None:
            kubelet = self.kubelet
            nodes, lost = (kubelet.nodes, kubelet.lost) if isinstance(kubelet, Simulator) else ([NODE], None)
            self.scheduler = Scheduler(store, nodes=nodes, allocatable=self.allocatable, lost=lost)
            self.scheduler.start(in_front_of=self.kubelet.on_pod)
        self.api = FakeApi(store, token=self.token, logs=self.kubelet.logs, delete_pod=self.kubelet.delete_pod)
        self.api.bookmark_s, self.api.throttle = self.real.bookmark_s, self.real.throttle
        self._runner = web.AppRunner(self.api.app(), access_log=None, shutdown_timeout=2)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    async def _teardown(self) -> None:
        if self.store is not None:
            self.store.close_watches()
        if self.kubelet is not None:
            await self.kubelet.close()
        if self.sim_agent is not None:
            await self.sim_agent.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def close(self) -> list[str]:
        """Stop the server and remove everything the harness made; returns the names of containers that were still
        there (realized pods nobody deleted)."""
        left: list[str] = []
        if self._thread is not None and self._thread.is_alive():
            if self.mode == "realize" and self.kubelet is not None:
                left = [str(c.get("Names", ["?"])[0]).lstrip("/") for c in self._containers()]
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._teardown(), self._loop).result(60)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        elif self._thread is None and not self._loop.is_closed():
            self._loop.close()
        if self._docker is not None:
            for summary in self._containers():
                with contextlib.suppress(docker.errors.NotFound):
                    TEARDOWNS.run_sync(partial(self._docker.api.remove_container, summary["Id"], force=True, v=True))
            for network in self._docker.networks.list(filters={"label": f"fake-kube.harness={self.harness_id}"}):
                with contextlib.suppress(docker.errors.NotFound):
                    network.remove()
            self._docker.close()
            self._docker = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        return left

    def _containers(self) -> list[dict[str, Any]]:
        if self._docker is None:
            return []
        filters = {"label": f"fake-kube.harness={self.harness_id}"}
        return list(self._docker.api.containers(all=True, filters=filters))

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- running things on the server's loop

    def _submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        async def run() -> Any:
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` (awaited if it returns an awaitable) on the server's loop, awaited from another."""
        return await asyncio.wrap_future(self._submit(fn, *args, **kwargs))

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The same, blocking (from a thread that runs no event loop of the server's)."""
        return self._submit(fn, *args, **kwargs).result(60)

    # ---------------------------------------------------------------- controls

    async def pods(self, namespace: str | None = None) -> list[dict[str, Any]]:
        store = self._require_store()
        items, _ = await self.call(store.list, "pods", namespace or self.namespaces[0])
        return list(items)

    async def lose_node(self, node: str = "", *, phase: str | None = None) -> int:
        """Simulate: ``node`` stops reporting: its pods not Ready, evicted after ``eviction_s`` (with ``phase``: they
        fail at once, NodeLost). Realize: there is one node, so every realized pod fails (phase Failed unless
        given, NodeLost), and its container goes. Returns how many pods."""
        if isinstance(self.kubelet, Simulator):
            return int(await self.call(self.kubelet.lose_node, node, phase=phase))
        pods = await self.pods()
        for pod in pods:
            meta = pod["metadata"]
            message = f"Node fake-node which was running pod {meta['name']} is unresponsive"
            await self.call(self._evict, meta["namespace"], meta["name"], "NodeLost", message, phase or "Failed")
        return len(pods)

    async def evict(self, name: str, *, namespace: str | None = None) -> None:
        message = "The node was low on resource: memory."
        await self.call(self._evict, namespace or self.namespaces[0], name, "Evicted", message, "Failed")

    def _evict(self, namespace: str, name: str, reason: str, message: str, phase: str) -> None:
        if isinstance(self.kubelet, Realizer):
            self.kubelet.evict(namespace, name, reason=reason, message=message, phase=phase)
        elif isinstance(self.kubelet, Simulator):
            self.kubelet._fail(namespace, name, phase=phase, reason=reason, message=message)

    async def kill_container(self, name: str, *, namespace: str | None = None) -> str:
        """Realize: remove the pod's container behind the API's back (the fake kubelet then sees it gone); returns
        the container's id."""
        if not isinstance(self.kubelet, Realizer) or self._docker is None:
            raise RuntimeError("only realized pods have containers")
        container = await self.call(self.kubelet.container_of, namespace or self.namespaces[0], name)
        if container is None:
            raise RuntimeError(f"pod {name} has no running container")
        await TEARDOWNS.run(partial(self._docker.api.remove_container, container, force=True))
        return str(container)

    async def delete_pod(self, name: str, *, namespace: str | None = None, grace: int = 0) -> None:
        """Delete a pod as someone else would (kubectl delete pod): its container goes too."""
        kubelet = self.kubelet
        if kubelet is None:
            raise RuntimeError("the fake API server is not started")
        await self.call(kubelet.delete_pod, namespace or self.namespaces[0], name, grace)

    async def install_crds(self, crds: list[dict[str, Any]]) -> None:
        """Create CustomResourceDefinitions (as ``kubectl apply -f crds/``): their kinds are served from then on."""
        store = self._require_store()
        for crd in crds:
            await self.call(store.create, CRD_RESOURCE, "", crd)

    async def apply_quota(self, quota: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create (or replace) a ResourceQuota, e.g. the chart's: pod creates past its ``spec.hard`` are answered 403
        "exceeded quota" from then on (quota.py)."""
        store = self._require_store()
        where, name = namespace or self.namespaces[0], quota["metadata"]["name"]
        body = {**quota, "metadata": {**quota["metadata"], "namespace": where}}
        if (await self.call(store.list, "resourcequotas", where, fields=f"metadata.name={name}"))[0]:
            return dict(await self.call(store.replace, "resourcequotas", where, name, body))
        return dict(await self.call(store.create, "resourcequotas", where, body))

    async def events(self, *, pod: str | None = None, namespace: str | None = None) -> list[dict[str, Any]]:
        """The Events of the namespace (of one pod: its ``involvedObject``), as ``kubectl get events`` lists them."""
        store = self._require_store()
        fields = f"involvedObject.name={pod}" if pod else ""
        items, _ = await self.call(store.list, "events", namespace or self.namespaces[0], fields=fields)
        return list(items)

    async def throttle_next(self, requests: int, *, retry_after_s: int = 1) -> None:
        """Answer the next ``requests`` requests 429 Too Many Requests with ``Retry-After: retry_after_s``."""
        assert self.api is not None
        api = self.api

        def set_it() -> None:
            api.throttle_next, api.retry_after_s = requests, retry_after_s

        await self.call(set_it)

    async def requests(self) -> list[tuple[str, str]]:
        """(method, path?query) of every request so far (the API server's audit log, in short)."""
        assert self.api is not None
        return list(await self.call(list, self.api.requests))

    def forbid(self, verb: str, resource: str) -> None:
        """Answer ``verb`` on ``resource`` with 403, as a Role without it would."""
        assert self.api is not None
        self._loop.call_soon_threadsafe(self.api.forbidden.add, (verb, resource))

    def allow(self, verb: str, resource: str) -> None:
        assert self.api is not None
        self._loop.call_soon_threadsafe(self.api.forbidden.discard, (verb, resource))

    def _require_store(self) -> ObjectStore:
        if self.store is None:
            raise RuntimeError("the fake API server is not started")
        return self.store
