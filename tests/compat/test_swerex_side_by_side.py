"""SWE-ReX side by side: one sequence of actions (sessions, long output, timeouts, interrupts, interactive programs,
non-zero exits, syntax errors, missing files, binary and tree uploads, files outside the file API's roots) through
SWE-ReX's own ``LocalRuntime`` and through ``sandbox.compat.swerex`` (a terminal sandbox of a real control plane, no
network) gives the same observations and the same exception types.

The actions are played by tests/compat/swerex_driver.py in .venv-swerex (swe-rex 1.4.0; scripts/venv_swerex.sh),
which writes both traces; this test compares them step by step. It also runs docs/compat.md's SWE-ReX example. A
missing venv fails the test."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest

from sandbox.testing.server import ServerProcess
from tests.conftest import OWNER, RUN_ID, owned_by, require_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-swerex" / "bin" / "python"
DRIVER = Path(__file__).with_name("swerex_driver.py")
SX_OWNER = f"{OWNER}-swerex"
SX_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-swerex"
DRIVER_TIMEOUT_S = 600
"""The driver plays 74 steps twice: about 100 s on an idle 2-core machine, several times that on a busy one."""


def docs_example() -> str:
    """The example of docs/compat.md's SWE-ReX section (tagged ``text``: the docs' test venv has no swe-rex)."""
    section = (ROOT / "docs" / "compat.md").read_text().split("## SWE-ReX", 1)[1]
    found = re.search(r"```text\n(import asyncio\n.*?)```", section, re.DOTALL)
    assert found, "docs/compat.md's SWE-ReX section has no example"
    return found.group(1)


def normalised(outcome: dict[str, Any], mode: str) -> dict[str, Any]:
    """What must agree: the exception's type, or the returned model (its ``output`` too, unless ``mode`` says not:
    the driver's ``Step.compare``)."""
    if "raised" in outcome:
        return {"raised": outcome["raised"]}
    if mode == "type":
        return {"type": outcome["type"]}
    value = outcome["value"]
    if isinstance(value, dict) and mode in ("kind", "last"):
        value = {k: v for k, v in value.items() if k != "output"}
        if mode == "last":
            value["last line"] = outcome["value"]["output"].strip().splitlines()[-1:]
    return {"type": outcome["type"], "value": value}


def differences(local: list[dict[str, Any]], box: list[dict[str, Any]]) -> list[str]:
    found = []
    assert [s["step"] for s in local] == [s["step"] for s in box]
    for here, there in zip(local, box, strict=True):
        want, got = normalised(here, here["compare"]), normalised(there, here["compare"])
        if want != got:
            found.append(
                f"step {here['step']!r}:\n  LocalRuntime:   {json.dumps(want)[:600]}\n"
                f"  SandboxRuntime: {json.dumps(got)[:600]}\n  (sandbox message: {there.get('message', '')[:300]!r})"
            )
    return found


@pytest.mark.timeout(DRIVER_TIMEOUT_S + 60)
def test_swerex_local_and_sandbox_runtimes_agree(docker_client: docker.DockerClient, tmp_path: Path) -> None:
    if not VENV_PYTHON.exists():
        pytest.fail(f"{VENV_PYTHON} is missing: run `bash scripts/venv_swerex.sh` (scripts/setup.sh runs it)")
    require_image(docker_client, "terminal")
    out = tmp_path / "traces.json"
    # No TERM, for both bashes: the sandbox's has none, as in SWE-ReX's own Docker deployment (with TERM=xterm a
    # terminal's bracketed-paste mode adds \r\n around every output).
    # And a HOME of its own, empty: LocalRuntime's bash is interactive and would read this machine's ~/.bashrc.
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV") and k != "TERM"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    with owned_by(docker_client, SX_OWNER, SX_SOCKET_ROOT):
        server = ServerProcess(tmp_path, owner=SX_OWNER, socket_root=SX_SOCKET_ROOT).start()
        try:
            run = subprocess.run(
                [str(VENV_PYTHON), str(DRIVER), "--target", server.grpc_target, "--out", str(out)],
                capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, env=env, cwd="/",
            )  # fmt: skip
            example = subprocess.run(
                [str(VENV_PYTHON), "-c", docs_example().replace("127.0.0.1:50051", server.grpc_target)],
                capture_output=True, text=True, timeout=120, env=env, cwd="/",
            )  # fmt: skip
        finally:
            server.stop()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:] + server.log_tail()
    assert example.returncode == 0, example.stdout + example.stderr
    assert example.stdout.split("\n")[0] == "0 a.txt" and example.stdout.rstrip().endswith("hi"), example.stdout
    report = json.loads(out.read_text())
    local, box = report["local"], report["sandbox"]
    for here, there in zip(local, box, strict=True):
        print(f"{here['step']:45s} local {here['seconds']:7.3f} s   sandbox {there['seconds']:7.3f} s")
    found = differences(local, box)
    where = f"sandbox {report['sandbox_id']}"
    assert not found, f"{len(found)} of {len(local)} steps differ ({where}):\n" + "\n".join(found)
    # The comparison compared something: the steps that must raise did, on both sides, and outputs came through.
    raised = {s["step"]: s["raised"] for s in box if "raised" in s}
    assert raised["a command that times out"] == "swerex.exceptions.CommandTimeoutError"
    assert raised["upload a missing file"] == "builtins.FileNotFoundError"
    checksum = next(s for s in box if s["step"] == "its checksum")["value"]["output"]
    assert report["blob_sha256"] in checksum
    assert next(s for s in box if s["step"] == "long output (50000 lines)")["value"]["output"].count("\n") >= 50000
