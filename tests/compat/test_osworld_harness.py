"""OSWorld's own harness (desktop-env 1.0.2's ``DesktopEnv``) on the platform, against the platform's own scoring.

A real control plane (with a token: the preview forwarders trade tickets for cookies) and
``python -m sandbox.compat.osworld`` run in .venv-osworld (scripts/venv_osworld.sh), which builds ``DesktopEnv``
with ``sandbox.compat.osworld.make_env`` (two at once, in threads) and, for each task in tasks/osworld, does
OSWorld's ``reset(task)`` (its setup controller, over the in-VM API through the forwarders; downloads from
desktop-env's own cache, seeded from the tasks' fixtures), ``step`` with the reference solution (solved) or one
``WAIT`` (unsolved), and OSWorld's ``evaluate()``; then the platform's task layer scores the same end state.
Both must agree, and be 1 for the solved run and 0 for the unsolved one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.testing.server import ServerProcess
from tests.conftest import OWNER, RUN_ID, owned_by, require_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-osworld" / "bin" / "python"
TASKS = sorted((ROOT / "tasks" / "osworld").glob("*.json"))
OW_OWNER = f"{OWNER}-osworld"
OW_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-osworld"
TOKEN = "osworld-harness-token"
DRIVER_TIMEOUT_S = 500
PARALLEL = 2
"""Environments at once, each a desktop sandbox reset from task to task (as OSWorld's parallel runners run)."""


@pytest.fixture(scope="module")
def server(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    require_image(docker_client, "desktop")
    workdir = tmp_path_factory.mktemp("osworld")
    with owned_by(docker_client, OW_OWNER, OW_SOCKET_ROOT):
        process = ServerProcess(workdir, owner=OW_OWNER, socket_root=OW_SOCKET_ROOT, tokens={TOKEN: "alpha"})
        try:
            yield process.start()
        finally:
            process.stop()
            print(process.log_tail())


def run_driver(
    server: ServerProcess, tasks: list[Path], out: Path, runs: str = "solved,unsolved"
) -> list[dict[str, Any]]:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: make it with `bash scripts/venv_osworld.sh` (make setup runs it)")
    argv = [str(VENV_PYTHON), "-m", "sandbox.compat.osworld", "--target", server.grpc_target, "--token", TOKEN]
    argv += ["--runs", runs, "--parallel", str(PARALLEL), "--out", str(out)]
    done = subprocess.run(
        [*argv, *map(str, tasks)], capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=ROOT, check=False
    )
    print(done.stderr[-20000:])  # desktop_env's log, shown with a failure
    assert done.returncode == 0, f"the runner failed ({done.returncode}):\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_there_are_enough_osworld_tasks() -> None:
    assert len(TASKS) >= 12, [p.name for p in TASKS]
    for path in TASKS:
        assert path.with_name(path.stem + ".solution.jsonl").is_file(), f"{path.name} has no reference solution"


@pytest.mark.timeout(DRIVER_TIMEOUT_S + 60)
def test_osworld_rewards_agree_with_the_platform_on_solved_and_unsolved_runs(
    server: ServerProcess, tmp_path: Path
) -> None:
    lines = run_driver(server, TASKS, tmp_path / "runs.jsonl")
    started = [line for line in lines if line.get("event") == "started"]
    events = [line for line in lines if "event" in line]
    assert len({line["sandbox"] for line in started}) == PARALLEL, f"environments started: {events}"
    runs = [line for line in lines if "run" in line]
    by_key = {(line["task"], line["run"]): line for line in runs}
    problems = []
    for path in TASKS:
        task_id = json.loads(path.read_text())["id"]
        for run, want in (("solved", 1.0), ("unsolved", 0.0)):
            line = by_key.get((task_id, run))
            if line is None:
                problems.append(f"{task_id} {run}: no result")
            elif "error" in line:
                problems.append(f"{task_id} {run}: {line['error']}")
            elif not (line["osworld"] == line["platform"] == want):
                problems.append(
                    f"{task_id} {run}: OSWorld {line['osworld']}, platform {line['platform']}, want {want} "
                    f"({json.dumps(line['details'])[:600]})"
                )
    timings = [f"{r['task']} {r['run']}: reset {r['reset_s']:.1f}s" for r in runs if "reset_s" in r]
    assert not problems, "\n".join([*problems, "", *timings])
