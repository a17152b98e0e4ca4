"""``sandbox task check`` and ``sandbox task run`` (against the module's fake-backend server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from sandbox.cli import app
from sandbox.client import AsyncClient
from tests.unit.conftest import ALPHA_TOKEN
from tests.unit.service.test_episodes import TASK, task

RECORD_TRAJECTORIES = True  # the conftest's service records this module's trajectories to a directory
runner = CliRunner()


def test_task_check(tmp_path: Path) -> None:
    good, bad, warn = tmp_path / "good.json", tmp_path / "bad.json", tmp_path / "warn.json"
    good.write_text(json.dumps(TASK))
    bad.write_text(json.dumps(task(config=[{"type": "googledrive", "parameters": {}}], evaluator={"func": "nope"})))
    download = {"type": "download", "parameters": {"files": [{"url": "https://x.org/a.txt", "path": "/tmp/a.txt"}]}}
    warn.write_text(json.dumps(task(config=[download])))

    result = runner.invoke(app, ["task", "check", str(good), str(warn)])
    assert result.exit_code == 0, result.output
    assert f"{good}: ok" in result.output
    assert "warning" in result.output and "https://x.org/a.txt has no fixture" in result.output

    result = runner.invoke(app, ["task", "check", str(good), str(bad)])
    assert result.exit_code == 1, result.output
    assert "unsupported setup type 'googledrive'" in result.output and "unsupported function 'nope'" in result.output
    assert f"{good}: ok" in result.output  # every file is checked

    (tmp_path / "broken.json").write_text("{")
    result = runner.invoke(app, ["task", "check", str(tmp_path / "broken.json"), str(tmp_path / "missing.json")])
    assert result.exit_code == 1 and "not valid JSON" in result.output and "cannot read" in result.output


async def test_task_run(target: str, alpha: AsyncClient, tmp_path: Path) -> None:
    (tmp_path / "hello.json").write_text(json.dumps(TASK))
    solution = [{"type": "exec", "cmd": "echo hello > hello.txt"}, {"type": "DONE"}, {"type": "exec", "cmd": "true"}]
    (tmp_path / "hello.solution.jsonl").write_text("\n".join(json.dumps(a) for a in solution) + "\n")
    (tmp_path / "nothing.jsonl").write_text("\n")
    env = {"SANDBOX_TARGET": target, "SANDBOX_TOKEN": ALPHA_TOKEN}
    before = {s.id for s in await alpha.list()}

    result = await asyncio.to_thread(runner.invoke, app, ["task", "run", str(tmp_path / "hello.json")], env=env)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("reward 1"), result.output
    assert "episode ended: done" in result.output and "step 3" not in result.output

    args = ["task", "run", str(tmp_path / "hello.json"), "--actions", str(tmp_path / "nothing.jsonl")]
    result = await asyncio.to_thread(runner.invoke, app, args, env=env)
    assert result.exit_code == 0 and result.output.strip().endswith("reward 0"), result.output
    assert {s.id for s in await alpha.list()} == before  # the sandboxes are deleted

    (tmp_path / "bad.jsonl").write_text('{"type": "teleport"}\n')
    args = ["task", "run", str(tmp_path / "hello.json"), "--actions", str(tmp_path / "bad.jsonl")]
    result = await asyncio.to_thread(runner.invoke, app, args, env=env)
    assert result.exit_code == 1 and "bad.jsonl:1" in result.output, result.output
