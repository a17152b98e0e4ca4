"""Shared fixtures. Every container a test makes carries the labels of this test run
(sandbox.owner=test-<run id>); teardown removes them all and fails the run on a leak."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import docker
import pytest
import pytest_asyncio

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.backends.docker.backend import DockerBackend
from sandbox.backends.docker.claims import CLAIMS_DIR
from sandbox.backends.docker.config import DockerConfig
from sandbox.backends.docker.teardown import TeardownLane
from sandbox.models import SandboxSpec
from tests import engine_watch

RUN_ID = os.environ.get("SANDBOX_TEST_RUN_ID") or secrets.token_hex(4)
OWNER = f"test-{RUN_ID}"
SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}"
TEST_LABEL = {"sandbox.test-run": RUN_ID}
# The harness's own removals take turns with the control planes' on this engine (teardown.py).
HARNESS_TEARDOWNS = TeardownLane()


def owner_filter() -> dict[str, list[str]]:
    return {"label": [f"{LABEL_MANAGED_BY}={MANAGED_BY}", f"{LABEL_OWNER}={OWNER}"]}


@contextlib.contextmanager
def owned_by(docker_client: docker.DockerClient, owner: str, socket_root: str) -> Iterator[None]:
    """Everything labelled ``owner`` (a control plane of its own, ``f"{OWNER}-<suffix>"``): its containers, then its
    networks (the per-tenant ``sbx-internal-<owner>-<hash>``), and its socket root, is removed at the end, whatever
    the test did. The one teardown path of such a test."""
    try:
        yield
    finally:
        _remove_owned(docker_client, owner)
        shutil.rmtree(socket_root, ignore_errors=True)


def _remove_owned(docker_client: docker.DockerClient, owner: str, attempts: int = 5) -> None:
    """By id from the low-level listings: a container or network the server removes meanwhile must not stop the
    clean-up. Containers go one at a time, in turn with every control plane on this engine: two teardowns at once
    can make Debian's dockerd 20.10.24 deadlock in libnetwork (moby/moby#46661; docs/hardening.md). A network still in
    use (a container being made, or removed by someone else, when the containers were listed) is tried again after
    the next pass over the containers; one left after ``attempts`` passes fails the test."""
    label = {"label": f"{LABEL_OWNER}={owner}"}

    def remove_container(container_id: str) -> None:
        try:
            docker_client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as e:  # 409: someone else's removal of it is under way
            if e.status_code != 409:
                raise

    for attempt in range(attempts):
        for summary in docker_client.api.containers(all=True, filters=label):
            HARNESS_TEARDOWNS.run_sync(partial(remove_container, summary["Id"]))
        in_use: list[str] = []
        for network in docker_client.api.networks(filters=label):
            try:
                docker_client.api.remove_network(network["Id"])
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as e:  # in use (403/409 by engine version): the next pass
                in_use.append(f"{network['Name']}: {e.explanation}")
        if not in_use:
            return
        if attempt + 1 < attempts:
            time.sleep(0.5)
    raise AssertionError(f"networks of {owner} left in use after {attempts} clean-up passes: {in_use}")


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    """The real engine. A missing engine fails the run: it is never a reason to skip."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as e:
        pytest.fail(f"no Docker engine answers ({e}); run `make setup` (it starts dockerd)", pytrace=False)
    yield client
    client.close()


def require_image(client: docker.DockerClient, kind: str) -> None:
    if not client.images.list(name=f"sandbox/{kind}"):
        pytest.fail(f"the {kind} image is not built; run `make images`", pytrace=False)


@pytest_asyncio.fixture(scope="session")
async def backend(docker_client: docker.DockerClient) -> AsyncIterator[DockerBackend]:
    backend = DockerBackend(DockerConfig(owner=OWNER, socket_root=SOCKET_ROOT))
    yield backend
    await backend.close()
    leaked = docker_client.containers.list(all=True, filters=owner_filter())
    _remove_owned(docker_client, OWNER)  # the containers, then the networks
    for volume in docker_client.volumes.list(filters=owner_filter()):
        volume.remove(force=True)
    socket_dirs = os.listdir(SOCKET_ROOT) if os.path.isdir(SOCKET_ROOT) else []
    claims = os.path.join(SOCKET_ROOT, CLAIMS_DIR)
    if CLAIMS_DIR in socket_dirs and not os.listdir(claims):
        socket_dirs.remove(CLAIMS_DIR)  # the claims folder itself stays; a claim left in it is a leak
    shutil.rmtree(SOCKET_ROOT, ignore_errors=True)
    assert not leaked, f"tests leaked containers: {[c.name for c in leaked]}"
    assert not socket_dirs, f"tests leaked socket directories: {socket_dirs}"


class Sandbox:
    """A started sandbox in a test: its id, its agent, and its backend."""

    def __init__(self, sandbox_id: str, spec: SandboxSpec, backend: DockerBackend) -> None:
        self.id = sandbox_id
        self.spec = spec
        self.backend = backend
        self.agent: AgentClient = backend.agent(sandbox_id)

    def container(self) -> Any:
        return self.backend.client.containers.get(self.backend.container_name(self.id))

    def __repr__(self) -> str:
        return f"Sandbox({self.id}, {self.spec.kind.value})"


SandboxFactory = Callable[..., Awaitable[Sandbox]]


@pytest_asyncio.fixture
async def make_sandbox(backend: DockerBackend, request: pytest.FixtureRequest) -> AsyncIterator[SandboxFactory]:
    made: list[Sandbox] = []

    async def make(kind: str = "terminal", **spec: Any) -> Sandbox:
        await asyncio.to_thread(require_image, backend.client, kind)
        sandbox_id = f"{kind[:4]}-{secrets.token_hex(4)}"
        full = SandboxSpec.model_validate({"kind": kind, "labels": TEST_LABEL, **spec})
        await backend.create(sandbox_id, full)
        sandbox = Sandbox(sandbox_id, full, backend)
        made.append(sandbox)
        return sandbox

    yield make
    failed = getattr(request.node, "rep_call", None)
    for sandbox in made:
        if failed is not None and failed.failed:
            print(f"\n[{request.node.name}] sandbox {sandbox.id} logs:\n{await backend.logs(sandbox.id, tail=40)}")
        await backend.destroy(sandbox.id)
    await asyncio.sleep(0)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    if report.failed and item.get_closest_marker("docker") and not item.session.shouldstop:
        reason = engine_watch.stop_reason()
        if reason:
            item.session.shouldstop = reason
            report.sections.append(("engine", reason))
    return report
