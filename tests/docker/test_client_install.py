"""The light client: ``pip install <repo>`` with no extras into a fresh venv (no system site-packages) pulls only
what a client needs, none of the server's dependencies, and that venv's python runs an episode of a terminal sample
task against a real server (reward 1). The project is staged into a temporary folder first (``pyproject.toml``,
``README.md``, the package), so the build writes nothing into the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.testing.server import ServerProcess
from tests.conftest import OWNER, RUN_ID, owned_by, require_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
CL_OWNER = f"{OWNER}-cl"
CL_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-cl"
SERVER_ONLY = ("fastapi", "uvicorn", "docker", "redis", "prometheus_client", "websockets", "PIL", "kubernetes_asyncio")
CLIENT_NEEDS = ("grpc", "google.protobuf", "pydantic", "httpx", "typer", "rich")
EPISODE = """
import sys
from sandbox.client import Client
from sandbox.tasks.actions import load_actions
target, task = sys.argv[1], sys.argv[2]
with Client(target) as client, client.create("terminal") as sb:
    obs = sb.reset(task=task)
    for action in load_actions(task.removesuffix(".json") + ".solution.jsonl"):
        obs = sb.step(action)
        if obs.done:
            break
    print("reward", sb.evaluate())
"""


def _stage(dest: Path) -> None:
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "sandbox", dest / "sandbox", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("client-install")
    _stage(work / "project")
    venv = work / "venv"
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)  # no system site-packages
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(work / "project")],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(f"pip install of the client took {time.monotonic() - started:.1f}s")
    yield python


def test_the_client_installs_without_the_servers_dependencies(client_venv: Path) -> None:
    probe = (
        "import importlib.util as u, sys; "
        f"print(' '.join(m for m in {SERVER_ONLY!r} if u.find_spec(m) is not None)); "
        f"print(' '.join(m for m in {CLIENT_NEEDS!r} if u.find_spec(m) is None)); "
        "print(sys.prefix != sys.base_prefix)"
    )
    out = subprocess.run([str(client_venv), "-c", probe], capture_output=True, text=True, timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    server_only, missing, in_venv = out.stdout.split("\n")[:3]
    assert server_only == "", f"the client install pulled server dependencies: {server_only}"
    assert missing == "" and in_venv == "True"
    cli = subprocess.run([str(client_venv.with_name("sandbox")), "--help"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and "trajectory" in cli.stdout
    server = subprocess.run(
        [str(client_venv.with_name("sandbox")), "server"], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert server.returncode == 2 and "sandbox[server]" in server.stderr  # the control plane needs the server extra


def test_an_episode_through_the_client_alone(
    client_venv: Path, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    require_image(docker_client, "terminal")
    task = str(ROOT / "tasks" / "terminal-sort-names.json")
    with owned_by(docker_client, CL_OWNER, CL_SOCKET_ROOT):
        server = ServerProcess(tmp_path, owner=CL_OWNER, socket_root=CL_SOCKET_ROOT).start()
        try:
            run = subprocess.run(
                [str(client_venv), "-c", EPISODE, server.grpc_target, task],
                capture_output=True, text=True, timeout=300, cwd="/",
            )  # fmt: skip
        finally:
            server.stop()
    assert run.returncode == 0, run.stdout + run.stderr + server.log_tail()
    assert run.stdout.strip().endswith("reward 1.0")
    for image in docker_client.images.list(filters={"label": f"sandbox.owner={CL_OWNER}"}):
        docker_client.images.remove(image.id, force=True)
