"""Episodes over the fake backend (terminal sandboxes), through gRPC (the async SDK), REST and the service: reset to
a task (setup run), steps counted to DONE, FAIL, the step limit or the time limit, evaluate, and the refusals
(unsupported task, another kind, a step after the end). The fake backend cannot snapshot, so every reset to a task
runs its setup (tests/docker/test_episodes.py covers the snapshot fast path)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandbox.client import AsyncClient
from sandbox.errors import FailedPrecondition, InvalidArgument
from sandbox.models import Exec, SandboxSpec
from sandbox.service import Principal, SandboxService
from sandbox.service.episodes import split_setup
from sandbox.tasks.model import Task
from tests.unit.conftest import ALPHA, ALPHA_TOKEN, LOGGER

RECORD_TRAJECTORIES = True  # the conftest's service records this module's trajectories to a directory

TASK: dict[str, Any] = {
    "id": "write-hello",
    "instruction": "Write 'hello' into hello.txt in the workspace.",
    "sandbox": {"kind": "terminal"},
    "config": [{"type": "execute", "parameters": {"command": "echo ready > setup.txt", "shell": True}}],
    "evaluator": {
        "func": "exact_match",
        "result": {"type": "vm_command_line", "command": "cat hello.txt", "shell": True},
        "expected": {"type": "rule", "rules": {"expected": "hello\n"}},
    },
    "limits": {"max_steps": 5, "max_seconds": 120},
}
SOLVE = {"type": "exec", "cmd": "echo hello > hello.txt"}


def task(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(TASK)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    return data


async def test_an_episode_over_grpc_from_reset_to_reward(alpha: AsyncClient, service: SandboxService) -> None:
    async with await alpha.create("terminal") as sb:
        before = service.setups_run
        obs = await sb.reset(task=TASK)
        assert service.setups_run == before + 1
        assert obs.done is False and obs.screenshot is None  # a terminal has no display
        assert obs.info["steps"] == 0 and obs.info["task_id"] == "write-hello" and obs.info["setup_ran"] is True
        assert obs.info["trajectory_id"].startswith("tr-") and "setup" in obs.timings_ms
        assert (await sb.files.read("setup.txt")) == b"ready\n"  # the setup ran in the sandbox
        assert await sb.evaluate() == 0.0  # nothing done yet

        first = await sb.step(SOLVE)
        assert first.exec is not None and first.exec.exit_code == 0
        assert (first.done, first.info["steps"], first.info["reason"]) == (False, 1, None)
        done = await sb.step("DONE")  # OSWorld's spelling
        assert (done.done, done.info["steps"], done.info["reason"], done.info["truncated"]) == (True, 2, "done", False)
        with pytest.raises(FailedPrecondition, match=r"ended .*done.*reset the sandbox to a task"):
            await sb.step(SOLVE)
        assert await sb.evaluate() == 1.0

        trajectory = await alpha.trajectories.get(obs.info["trajectory_id"])
        assert [s.index for s in trajectory.steps] == [0, 1, 2]
        assert trajectory.steps[0].action is None and trajectory.steps[1].action == {**SOLVE, **_exec_defaults()}
        assert trajectory.steps[2].action == {"type": "done"} and trajectory.steps[2].observation.done
        info = trajectory.info
        assert (info.task_id, info.steps, info.done, info.reason, info.reward) == ("write-hello", 2, True, "done", 1.0)
        assert (info.sandbox_id, info.kind.value, info.frames) == (sb.id, "terminal", 0)
        assert info.task_digest is not None and info.ended_at is not None and info.image


def _exec_defaults() -> dict[str, Any]:
    return Exec(cmd="x").model_dump(mode="json", exclude={"cmd", "type"})


async def test_an_episode_over_rest(api: httpx.AsyncClient, alpha: AsyncClient) -> None:
    async with await alpha.create("terminal") as sb:
        url = f"/v1/sandboxes/{sb.id}"
        r = await api.post(f"{url}/reset", json={"task": TASK}, headers=ALPHA)
        assert r.status_code == 200, r.text
        start = r.json()
        assert start["sandbox"]["id"] == sb.id and start["observation"]["info"]["steps"] == 0
        r = await api.post(f"{url}/step", json={"action": SOLVE}, headers=ALPHA)
        assert r.status_code == 200 and r.json()["info"]["steps"] == 1, r.text
        r = await api.post(f"{url}/step", json={"action": {"type": "DONE"}}, headers=ALPHA)
        assert r.json()["done"] is True and r.json()["info"]["reason"] == "done", r.text
        r = await api.post(f"{url}/step", json={"action": SOLVE}, headers=ALPHA)
        assert r.status_code == 409 and "reset" in r.json()["error"]["message"], r.text
        r = await api.post(f"{url}/evaluate", headers=ALPHA)
        assert r.status_code == 200 and r.json() == {"reward": 1.0}, r.text
        # a plain reset still answers with the sandbox, and ends the episode
        r = await api.post(f"{url}/reset", headers=ALPHA)
        assert r.status_code == 200 and r.json()["id"] == sb.id, r.text
        r = await api.post(f"{url}/evaluate", headers=ALPHA)
        assert r.status_code == 409 and "reset it to a task" in r.json()["error"]["message"], r.text


async def test_the_step_limit_truncates(alpha: AsyncClient) -> None:
    async with await alpha.create("terminal") as sb:
        await sb.reset(task=task(limits={"max_steps": 2}))
        assert (await sb.step({"type": "exec", "cmd": "true"})).done is False
        last = await sb.step({"type": "exec", "cmd": "true"})
        assert (last.done, last.info["truncated"], last.info["reason"], last.info["steps"]) == (
            True, True, "step_limit", 2,
        )  # fmt: skip
        with pytest.raises(FailedPrecondition, match="step_limit"):
            await sb.step({"type": "exec", "cmd": "true"})


async def test_the_time_limit_truncates_and_the_late_action_is_not_done(alpha: AsyncClient) -> None:
    async with await alpha.create("terminal") as sb:
        await sb.reset(task=task(limits={"max_seconds": 0.5}))
        await asyncio.sleep(0.6)
        late = await sb.step(SOLVE)
        assert (late.done, late.info["truncated"], late.info["reason"], late.info["steps"]) == (
            True, True, "time_limit", 0,
        )  # fmt: skip
        assert late.exec is None
        assert await sb.evaluate() == 0.0  # the action came too late: hello.txt was never written


async def test_fail_ends_the_episode_and_an_infeasible_task_scores_only_on_it(alpha: AsyncClient) -> None:
    infeasible = task(id="impossible", evaluator={"func": "infeasible"})
    for data in (infeasible, {**infeasible, "evaluator": {"func": "infeasible", "result": {}, "expected": {}}}):
        async with await alpha.create("terminal") as sb:
            await sb.reset(task=data)
            end = await sb.step({"type": "fail"})
            assert (end.done, end.info["reason"]) == (True, "fail")
            assert await sb.evaluate() == 1.0
            await sb.reset(task=data)
            await sb.step("DONE")
            assert await sb.evaluate() == 0.0
    async with await alpha.create("terminal") as sb:  # a feasible task given up on scores 0 even when solved
        await sb.reset(task=TASK)
        await sb.step(SOLVE)
        await sb.step("FAIL")
        assert await sb.evaluate() == 0.0


async def test_tasks_sharing_a_setup_keep_their_own_evaluators(alpha: AsyncClient) -> None:
    """Same setup, same post-setup state (one digest), different evaluators: each episode is scored by its own."""
    infeasible = task(id="impossible", evaluator={"func": "infeasible"})
    assert Task.from_dict(infeasible).digest() == Task.from_dict(TASK).digest()
    async with await alpha.create("terminal") as a, await alpha.create("terminal") as b:
        await a.reset(task=TASK)
        await b.reset(task=infeasible)
        await a.step(SOLVE)
        await a.step("DONE")
        await b.step("DONE")
        assert (await a.evaluate(), await b.evaluate()) == (1.0, 0.0)


async def test_done_and_fail_need_an_episode(alpha: AsyncClient, api: httpx.AsyncClient) -> None:
    async with await alpha.create("terminal") as sb:
        for action in ("DONE", {"type": "fail"}):
            with pytest.raises(FailedPrecondition, match="runs none: reset it to a task"):
                await sb.step(action)
        with pytest.raises(FailedPrecondition, match="runs no episode"):
            await sb.evaluate()
        assert (await sb.step({"type": "exec", "cmd": "true"})).info == {}  # no episode: no episode info


async def test_a_task_that_cannot_run_here_is_refused_naming_each_reason(
    alpha: AsyncClient, api: httpx.AsyncClient
) -> None:
    bad = task(
        config=[{"type": "googledrive", "parameters": {}}, *TASK["config"]],
        evaluator={"func": ["exact_match", "compare_pptx_files"], "result": [TASK["evaluator"]["result"]] * 2},
    )
    async with await alpha.create("terminal") as sb:
        with pytest.raises(InvalidArgument) as caught:
            await sb.reset(task=bad)  # refused before anything is sent
        assert "'googledrive'" in caught.value.message and "'compare_pptx_files'" in caught.value.message
        r = await api.post(f"/v1/sandboxes/{sb.id}/reset", json={"task": bad}, headers=ALPHA)
        assert r.status_code == 422, r.text
        assert "'googledrive'" in r.json()["error"]["message"] and "compare_pptx_files" in r.json()["error"]["message"]
        assert (await sb.files.list(".")) == []  # nothing ran


async def test_grpc_refuses_a_bad_task_sent_as_it_is(alpha: AsyncClient, target: str) -> None:
    """The server checks too, whatever a client sends (the SDK checks first)."""
    import grpc

    from sandbox.wire.grpc_gen import sandbox_pb2 as pb
    from sandbox.wire.grpc_gen import sandbox_pb2_grpc as pb_grpc

    async with await alpha.create("terminal") as sb, grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.SandboxServiceStub(channel)
        bad = task(config=[{"type": "googledrive", "parameters": {}}])
        metadata = (("authorization", f"Bearer {ALPHA_TOKEN}"),)
        for task_json, pattern in ((json.dumps(bad), "googledrive"), ("{not json", "not valid JSON")):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Reset(pb.ResetRequest(sandbox_id=sb.id, task_json=task_json), metadata=metadata)
            assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert pattern in (caught.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            request = pb.ResetRequest(sandbox_id=sb.id, task_json=json.dumps(TASK), snapshot="x")
            await stub.Reset(request, metadata=metadata)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_a_task_for_another_kind_is_refused(alpha: AsyncClient) -> None:
    async with await alpha.create("terminal") as sb:
        with pytest.raises(FailedPrecondition, match=r"runs in a desktop sandbox.*is terminal"):
            await sb.reset(task=task(sandbox={"kind": "desktop"}))
        without = {k: v for k, v in TASK.items() if k != "sandbox"}  # OSWorld's files name none: a desktop
        with pytest.raises(FailedPrecondition, match="desktop"):
            await sb.reset(task=without)


async def test_without_snapshots_every_reset_runs_the_setup(
    service: SandboxService, caplog: pytest.LogCaptureFixture
) -> None:
    alice = Principal("alice")
    info = await service.create(alice, SandboxSpec(kind="terminal"))
    the_task = Task.from_dict(TASK)
    try:
        before = service.setups_run
        with caplog.at_level(logging.INFO, logger=LOGGER.name):
            first = await service.reset(alice, info.id, task=the_task)
            second = await service.reset(alice, info.id, task=the_task)
        assert service.setups_run == before + 2
        assert first.info["setup_steps"] == second.info["setup_steps"] == 1
        assert first.info["snapshot"] is None and second.info["snapshot"] is None  # none was swapped in
        assert any("cannot take snapshots: every reset to a task runs its setup" in r.message for r in caplog.records)
        assert not await service.list_snapshots(alice)
        # the second reset ended the first episode's trajectory, unfinished
        abandoned = await service.get_trajectory(alice, first.info["trajectory_id"])
        assert (abandoned.info.reason, abandoned.info.done) == ("reset", False)
    finally:
        await service.delete(alice, info.id)


async def test_episode_state_lives_in_the_store(service: SandboxService) -> None:
    """Another replica on the same store serves the next step of an episode (and scores it)."""
    alice = Principal("alice")
    info = await service.create(alice, SandboxSpec(kind="terminal"))
    other = SandboxService(service.backend, service.store, logger=LOGGER, trajectories=service.trajectories)
    try:
        await service.reset(alice, info.id, task=Task.from_dict(TASK))
        await service.step(alice, info.id, Exec(cmd="echo hello > hello.txt"))
        obs = await other.step(alice, info.id, Exec(cmd="true"))
        assert obs.info["steps"] == 2
        assert await other.evaluate(alice, info.id) == 1.0
        record = await service.records.read(info.id)
        assert record is not None and record.episode is not None and record.episode.reward == 1.0
    finally:
        await service.delete(alice, info.id)


async def test_files_a_task_downloads_are_sent_from_beside_its_file(alpha: AsyncClient, tmp_path: Path) -> None:
    """Setup downloads them; the evaluation (another replica, maybe) finds its own (``cloud_file``) kept too."""
    url, expected = "https://example.org/data/notes.txt", "https://example.org/data/expected.txt"
    (tmp_path / "fixtures" / "example.org" / "data").mkdir(parents=True)
    (tmp_path / "fixtures" / "example.org" / "data" / "notes.txt").write_text("from a fixture\n")
    (tmp_path / "fixtures" / "example.org" / "data" / "expected.txt").write_text("from a fixture\n")
    data = task(
        id="download-notes",
        config=[{"type": "download", "parameters": {"files": [{"url": url, "path": "notes.txt"}]}}],
        evaluator={
            "func": "diff_text_file",
            "result": {"type": "vm_file", "path": "notes.txt", "dest": "notes.txt"},
            "expected": {"type": "cloud_file", "path": expected, "dest": "expected.txt"},
        },
    )
    path = tmp_path / "task.json"
    path.write_text(json.dumps(data))
    async with await alpha.create("terminal") as sb:
        obs = await sb.reset(task=path)  # a path: the fixtures beside it travel with the task
        assert obs.info["task_id"] == "download-notes"
        assert await sb.evaluate() == 1.0
        (tmp_path / "task.json").rename(tmp_path / "moved.json")
        with pytest.raises(InvalidArgument, match="no fixture for the URL"):
            await sb.reset(task=data)  # a dict has no fixtures beside it, nor does the server


def test_a_snapshot_stands_for_the_setup_up_to_the_first_step_on_live_programs() -> None:
    """Files are kept by a snapshot; programs (and their windows, tabs) are not: those steps run on every reset."""
    steps = [
        {"type": "execute", "parameters": {"command": "true"}},
        {"type": "download", "parameters": {"files": []}},
        {"type": "launch", "parameters": {"command": "xterm"}},
        {"type": "execute", "parameters": {"command": "true"}},
    ]
    kept, live = split_setup(Task.from_dict(task(sandbox={"kind": "desktop"}, config=steps)))
    assert [s.type for s in kept] == ["execute", "download"] and [s.type for s in live] == ["launch", "execute"]
    kept, live = split_setup(Task.from_dict(TASK))
    assert [s.type for s in kept] == ["execute"] and live == []
    browser = task(
        sandbox={"kind": "browser"},
        config=[{"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["about:blank"]}}],
    )
    assert split_setup(Task.from_dict(browser)) == ([], Task.from_dict(browser).config)
