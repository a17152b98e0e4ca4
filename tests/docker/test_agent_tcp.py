"""The agent over TCP in a real container, as a Kubernetes pod would run it: no shared unix socket, the secret
mounted read-only, the control plane reaching the sandbox's own address on an internal network."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
import pytest_asyncio

from sandbox.backends.agent_client import AgentClient
from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.errors import Unauthenticated
from sandbox.protocol import LISTEN_ENV, TOKEN_FILE_ENV
from tests.conftest import OWNER, RUN_ID, TEST_LABEL, require_image

pytestmark = pytest.mark.docker

PORT = 7000
SECRET_DIR = "/run/sandbox-secret"
SANDBOX_UID = 1000


@dataclass
class TcpSandbox:
    container: Any
    ip: str
    token: str

    def client(self, token: str | None = None) -> AgentClient:
        return AgentClient.tcp(self.ip, PORT, token=self.token if token is None else token, label="tcp sandbox")


def _secret_dir(tmp_path: Path, token: str) -> Path:
    """The token, readable by the sandbox user only, as a pod's Secret volume would hold it."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text(token + "\n")
    if os.geteuid() == 0:
        for path in (secret, secret / "token"):
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        os.chmod(secret / "token", 0o400)
        os.chmod(secret, 0o500)
    else:
        os.chmod(secret / "token", 0o644)
        os.chmod(secret, 0o755)
    return secret


@pytest_asyncio.fixture
async def tcp_sandbox(docker_client: docker.DockerClient, tmp_path: Path) -> AsyncIterator[TcpSandbox]:
    await asyncio.to_thread(require_image, docker_client, "terminal")
    suffix = secrets.token_hex(4)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: OWNER, **TEST_LABEL}
    token = secrets.token_urlsafe(32)
    secret = _secret_dir(tmp_path, token)
    network = await asyncio.to_thread(
        docker_client.networks.create,
        f"sbx-test-{RUN_ID}-tcp-{suffix}",
        driver="bridge",
        internal=True,
        labels=labels,
    )
    container = None
    try:
        # The DockerBackend's hardening (sandbox/backends/docker/backend.py), the image's own user (uid 1000).
        container = await asyncio.to_thread(
            docker_client.containers.create,
            image="sandbox/terminal:latest",
            name=f"sbx-{OWNER}-tcp-{suffix}",
            hostname="sandbox",
            init=True,
            labels=labels,
            environment={
                "SANDBOX_KIND": "terminal",
                LISTEN_ENV: f"0.0.0.0:{PORT}",
                TOKEN_FILE_ENV: f"{SECRET_DIR}/token",
            },
            volumes={str(secret): {"bind": SECRET_DIR, "mode": "ro"}},
            network=network.name,
            mem_limit="512m",
            memswap_limit="512m",
            pids_limit=256,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
        )
        await asyncio.to_thread(container.start)
        await asyncio.to_thread(container.reload)
        ip = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        assert ip, "the container has no address on its internal network"
        sandbox = TcpSandbox(container, ip, token)
        probe = sandbox.client()
        try:
            await probe.wait_ready(30)
        except Exception:
            logs = (await asyncio.to_thread(container.logs, tail=40)).decode(errors="replace")
            pytest.fail(f"the agent did not answer on {ip}:{PORT}; the container's logs:\n{logs}")
        finally:
            await probe.close()
        yield sandbox
    finally:
        if container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                await asyncio.to_thread(container.remove, force=True, v=True)
        with contextlib.suppress(docker.errors.NotFound):
            await asyncio.to_thread(network.remove)


async def test_exec_over_tcp_on_the_sandbox_address(tcp_sandbox: TcpSandbox) -> None:
    client = tcp_sandbox.client()
    try:
        result = await client.exec("id -u; hostname; test -S /run/sandbox/agent.sock && echo unix-too")
        assert result.exit_code == 0
        assert result.stdout.split() == [str(SANDBOX_UID), "sandbox", "unix-too"]
        answers = await asyncio.gather(*(client.exec(["echo", str(i)]) for i in range(16)))
        assert [a.stdout.strip() for a in answers] == [str(i) for i in range(16)]
        assert (await client.health()).ok
    finally:
        await client.close()


async def test_a_wrong_token_is_refused_and_never_logged(tcp_sandbox: TcpSandbox) -> None:
    wrong = secrets.token_urlsafe(32)
    refused = tcp_sandbox.client(wrong)
    with pytest.raises(Unauthenticated) as caught:
        await refused.ping()
    assert wrong not in str(caught.value) and tcp_sandbox.token not in str(caught.value)
    await refused.close()

    client = tcp_sandbox.client()
    try:
        log = await client.read_file("/tmp/sandbox-logs/agent.log")
    finally:
        await client.close()
    text = log.decode(errors="replace")
    assert "refused an unauthenticated connection from" in text
    assert wrong not in text and tcp_sandbox.token not in text
