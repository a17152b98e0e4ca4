"""`sandbox images push` against a real registry: Debian's ``docker-registry`` served on 127.0.0.1 by the test (its
own config, storage in a temporary directory), stopped by its PID at the end. Images are pulled back with the engine
and compared by id; every registry-qualified tag the tests make is removed.

The control-plane image is built here when it is missing or stale (``make setup`` does not build it): about 40 s
after a source change, 100 s from nothing, then pushed and started once to see it serve.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from sandbox import __version__
from sandbox.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from sandbox.backends.docker.images.builder import load_recipe
from tests.conftest import OWNER, owned_by, require_image
from tests.docker.servers import SANDBOX_BIN, free_port

pytestmark = pytest.mark.docker

REGISTRY_BIN = "/usr/bin/docker-registry"
DOCKER_SOCKET = "/var/run/docker.sock"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)


@dataclass(frozen=True)
class Registry:
    address: str
    log: Path

    def get(self, path: str, **headers: str) -> httpx.Response:
        return httpx.get(f"http://{self.address}{path}", headers=headers, timeout=10)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """docker-registry on 127.0.0.1:<free port>; a missing binary fails the test, it is never a reason to skip."""
    if not os.access(REGISTRY_BIN, os.X_OK):
        pytest.fail(
            f"{REGISTRY_BIN} is missing: apt-get install docker-registry (scripts/setup.sh installs it)", pytrace=False
        )
    workdir = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{free_port()}"
    config = {  # YAML is a superset of JSON
        "version": 0.1,
        "log": {"level": "info"},
        "storage": {"filesystem": {"rootdirectory": str(workdir / "data")}, "delete": {"enabled": True}},
        "http": {"addr": address, "secret": "test-registry"},
    }
    (workdir / "config.yml").write_text(json.dumps(config))
    log = workdir / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [REGISTRY_BIN, "serve", str(workdir / "config.yml")],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        served = Registry(address, log)
        _wait_for(served, process)
        yield served
    finally:
        _stop(process)


def _wait_for(served: Registry, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"docker-registry exited with {process.returncode}:\n{served.log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if served.get("/v2/").status_code == 200:
                return
        time.sleep(0.1)
    pytest.fail(f"docker-registry did not answer on {served.address} within 15s:\n{served.log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture
def registry_tags(docker_client: docker.DockerClient, registry: Registry) -> Iterator[None]:
    """Removes every local tag naming this test's registry (its port is ours alone), whatever the test did."""
    yield
    for image in docker_client.api.images():
        for ref in image.get("RepoTags") or []:
            if ref.startswith(f"{registry.address}/"):
                with contextlib.suppress(docker.errors.NotFound):
                    docker_client.api.remove_image(ref, noprune=True)


def sandbox_cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SANDBOX_BIN, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "400"},
    )


def _pushed(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The ``<ref> <digest>`` lines the command ends with."""
    assert result.returncode == 0, f"push failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr}"
    return dict(line.split() for line in result.stdout.splitlines() if " sha256:" in line and "|" not in line)


def _local_tags(docker_client: docker.DockerClient, prefix: str) -> list[str]:
    return [
        ref for image in docker_client.api.images() for ref in image.get("RepoTags") or [] if ref.startswith(prefix)
    ]


def _check_in_registry(registry: Registry, repository: str, tag: str, digest: str) -> None:
    """The registry lists the repository and tag, serves the manifest under the pushed digest, and holds its blobs."""
    assert repository in registry.get("/v2/_catalog").json()["repositories"]
    assert tag in registry.get(f"/v2/{repository}/tags/list").json()["tags"]
    manifest = registry.get(f"/v2/{repository}/manifests/{tag}", Accept=MANIFEST_TYPES)
    assert manifest.status_code == 200
    assert manifest.headers["Docker-Content-Digest"] == digest
    body = manifest.json()
    for blob in [body["config"], *body["layers"]]:
        head = httpx.head(f"http://{registry.address}/v2/{repository}/blobs/{blob['digest']}", timeout=10)
        assert head.status_code == 200, f"blob {blob['digest']} of {repository}:{tag} is missing"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["terminal", "desktop", "browser"])
def test_push_a_sandbox_image_and_pull_it_back(
    docker_client: docker.DockerClient, registry: Registry, registry_tags: None, kind: str
) -> None:
    """Desktop and browser take 35-60 s each here: the engine compresses their ~1 GB base layer as it pushes."""
    require_image(docker_client, kind)
    result = sandbox_cli("images", "push", registry.address, kind, timeout=560)
    pushed = _pushed(result)
    local = load_recipe(kind).versioned_tag  # the push built it first if it was stale
    tag = local.rsplit(":", 1)[1]
    remote = f"{registry.address}/sandbox/{kind}"
    # The recipe's hash, latest, and the platform's version (the Helm chart's default tag).
    assert set(pushed) == {f"{remote}:{tag}", f"{remote}:latest", f"{remote}:{__version__}"}
    assert pushed[f"{remote}:{tag}"] == pushed[f"{remote}:latest"] == pushed[f"{remote}:{__version__}"]
    assert f"[{kind}] push | " in result.stdout, "no progress lines were printed"
    for ref, digest in pushed.items():
        _check_in_registry(registry, f"sandbox/{kind}", ref.rsplit(":", 1)[1], digest)

    local_id = docker_client.api.inspect_image(local)["Id"]
    for ref in pushed:
        docker_client.api.remove_image(ref, noprune=True)
    assert not _local_tags(docker_client, f"{remote}:"), "the registry tags were not removed"
    docker_client.api.pull(remote, tag=tag)  # our own registry on 127.0.0.1: allowed
    assert docker_client.api.inspect_image(f"{remote}:{tag}")["Id"] == local_id


def test_push_to_an_unreachable_registry_fails_naming_it(
    docker_client: docker.DockerClient, registry_tags: None
) -> None:
    require_image(docker_client, "terminal")
    nowhere = f"127.0.0.1:{free_port()}"  # nothing listens there
    result = sandbox_cli("images", "push", nowhere, "terminal", "--no-build", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    message = " ".join(result.stderr.split())
    assert f"cannot reach the registry {nowhere}" in message
    assert not _local_tags(docker_client, f"{nowhere}/"), "a failed push left its tag behind"


def test_push_rejects_a_registry_url(registry_tags: None) -> None:
    result = sandbox_cli("images", "push", "http://127.0.0.1:5000", "terminal", "--no-build", timeout=60)
    assert result.returncode == 1
    assert "without a scheme" in " ".join(result.stderr.split())


@pytest.mark.timeout(900)
def test_controlplane_image_builds_pushes_and_serves(
    docker_client: docker.DockerClient, registry: Registry, registry_tags: None, tmp_path: Path
) -> None:
    started = time.monotonic()
    result = sandbox_cli("images", "push", registry.address, "controlplane", timeout=840)
    pushed = _pushed(result)
    print(f"controlplane build (if stale) and push: {time.monotonic() - started:.1f}s")
    local = load_recipe("controlplane").versioned_tag
    remote = f"{registry.address}/sandbox/controlplane"
    assert set(pushed) == {f"{remote}:{local.rsplit(':', 1)[1]}", f"{remote}:latest", f"{remote}:{__version__}"}
    for ref, digest in pushed.items():
        _check_in_registry(registry, "sandbox/controlplane", ref.rsplit(":", 1)[1], digest)

    config = docker_client.api.inspect_image(local)["Config"]
    assert config["User"] == "10001:10001"
    assert set(config["ExposedPorts"]) == {"50051/tcp", "8080/tcp"}
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "sandbox", "server"]
    _serve(docker_client, local, tmp_path)


def _serve(docker_client: docker.DockerClient, image: str, tmp_path: Path) -> None:
    """Run the image as a cluster would (read-only root, no capabilities, uid 10001, tokens from a file) on an
    internal network of this test (no route out), with this test's owner label, and check it serves the API, the
    web view's pages and noVNC at its address there; SIGTERM stops it."""
    owner = f"{OWNER}-cp"
    socket_gid = os.stat(DOCKER_SOCKET).st_gid
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"cp-test-token-0123456789": {"tenant": "ops", "admin": True}}))
    tokens.chmod(0o644)
    argv = [
        "--owner", owner, "--socket-root", "/tmp/sockets", "--state", "/tmp/state.json",
        "--host", "0.0.0.0", "--tokens-file", "/etc/sandbox/tokens.json", "--log-format", "text",
    ]  # fmt: skip
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_OWNER: owner}
    with owned_by(docker_client, owner, str(tmp_path / "sockets")):
        network = docker_client.networks.create(f"sbx-{owner}-net", driver="bridge", internal=True, labels=labels)
        try:
            _run_and_probe(docker_client, image, argv, labels, network.name, socket_gid, tokens)
        finally:
            network.remove()


def _run_and_probe(
    docker_client: docker.DockerClient,
    image: str,
    argv: list[str],
    labels: dict[str, str],
    network: str,
    socket_gid: int,
    tokens: Path,
) -> None:
    container: Any = docker_client.containers.run(
        image,
        argv,
        detach=True,
        labels=labels,
        network=network,
        read_only=True,
        tmpfs={"/tmp": ""},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        group_add=[str(socket_gid)],
        volumes={
            DOCKER_SOCKET: {"bind": DOCKER_SOCKET, "mode": "rw"},
            str(tokens): {"bind": "/etc/sandbox/tokens.json", "mode": "ro"},
        },
    )
    try:
        container.reload()
        address = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
        base = f"http://{address}:8080"  # the project's own container, on its internal network
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/metrics", timeout=2).status_code == 200:
                    break
            container.reload()
            logs = container.logs().decode(errors="replace")[-3000:]
            assert container.status == "running", f"the control plane exited:\n{logs}"
            assert time.monotonic() < deadline, f"the control plane did not serve within 60s:\n{logs}"
            time.sleep(0.2)
        for path in ("/view/static/style.css", "/view/novnc/core/rfb.js"):
            assert httpx.get(f"{base}{path}", timeout=5).status_code == 200, path
        stopping = time.monotonic()
        container.stop(timeout=20)
        assert time.monotonic() - stopping < 15, "SIGTERM did not stop the server (is tini forwarding it?)"
        assert container.wait(timeout=10)["StatusCode"] == 0, container.logs().decode(errors="replace")[-3000:]
    finally:
        container.remove(force=True)
