"""Rollouts end to end against a real `sandbox server` and real sandboxes: the gymnasium envs pass ``check_env``
(a terminal task, a desktop task, the task-less env), the vector env steps 8 terminal sandboxes at once, a recorded
episode replays to the same reward and exports to Parquet, and the web view replays it step by step (Chromium)."""

from __future__ import annotations

import contextlib
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import gymnasium
import httpx
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env
from playwright.sync_api import sync_playwright

import sandbox.gym
from sandbox.backends.base import LABEL_OWNER
from sandbox.client import Client
from sandbox.gym import SandboxVectorEnv
from sandbox.testing.server import SANDBOX_BIN, ServerProcess
from tests.conftest import OWNER, RUN_ID, owned_by, require_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "tasks"
TERMINAL_TASK = TASKS / "terminal-sort-names.json"
DESKTOP_TASK = TASKS / "desktop-xterm-hello.json"
TOKEN = "rollouts-alpha-token-0123456789"
OTHER_TOKEN = "rollouts-beta-token-0123456789"
RO_OWNER = f"{OWNER}-ro"
RO_SOCKET_ROOT = f"/run/sbx-test-{RUN_ID}-ro"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture(scope="module")
def server(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    for kind in ("terminal", "desktop"):
        require_image(docker_client, kind)
    workdir = tmp_path_factory.mktemp("rollouts")
    with owned_by(docker_client, RO_OWNER, RO_SOCKET_ROOT):
        process = ServerProcess(
            workdir, owner=RO_OWNER, socket_root=RO_SOCKET_ROOT, tokens={TOKEN: "alpha", OTHER_TOKEN: "beta"}
        )
        try:
            yield process.start()
        finally:
            process.stop()
            print(process.log_tail())
    for image in docker_client.images.list(filters={"label": f"{LABEL_OWNER}={RO_OWNER}"}):
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(image.id, force=True)


def cli(server: ServerProcess, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**server.env(TOKEN), "COLUMNS": "200"}
    return subprocess.run([SANDBOX_BIN, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def strict_check(env: gymnasium.Env[Any, Any]) -> None:
    """``check_env``, with every warning it gives an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)


# ---------------------------------------------------------------------------- gymnasium


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        (sandbox.gym.TASK_ENV_ID, {"task": str(TERMINAL_TASK)}),
        (sandbox.gym.TASK_ENV_ID, {"task": str(DESKTOP_TASK)}),
        (sandbox.gym.SANDBOX_ENV_ID, {"kind": "desktop", "spec": {"screen": {"width": 800, "height": 600}}}),
    ],
    ids=["task-terminal", "task-desktop", "sandbox-desktop"],
)
def test_check_env_passes_on_each_registered_env(server: ServerProcess, env_id: str, kwargs: dict[str, Any]) -> None:
    env = gymnasium.make(env_id, target=server.grpc_target, token=TOKEN, render_mode="rgb_array", **kwargs)
    try:
        started = time.monotonic()
        strict_check(env)
        print(f"check_env({env_id}, {kwargs}) took {time.monotonic() - started:.1f}s")
        obs, _ = env.reset(seed=3)
        assert obs in env.observation_space
        if env.unwrapped.screen is not None:  # type: ignore[attr-defined]
            screen = env.unwrapped.screen  # type: ignore[attr-defined]
            assert obs["screenshot"].shape == (screen.height, screen.width, 3)
            assert obs["screenshot"].any() or env_id != sandbox.gym.TASK_ENV_ID  # a task's app is on the screen
            assert np.array_equal(env.render(), obs["screenshot"])
        else:
            assert set(obs) == {"text"}
    finally:
        env.close()


def test_a_task_env_scores_its_reference_solution(server: ServerProcess) -> None:
    env = gymnasium.make(sandbox.gym.TASK_ENV_ID, task=str(DESKTOP_TASK), target=server.grpc_target, token=TOKEN)
    try:
        obs, info = env.reset()
        assert obs["screenshot"].shape == (800, 1280, 3) and info["task_id"] == "desktop-xterm-hello"
        solution = (TASKS / "desktop-xterm-hello.solution.jsonl").read_text().splitlines()
        rewards = []
        for line in solution:  # the JSON lines as an agent would write them
            obs, reward, terminated, truncated, info = env.step(line)
            rewards.append(reward)
        assert rewards[-1] == 1.0 and set(rewards[:-1]) == {0.0} and terminated and not truncated
        assert info["reason"] == "done" and info["reward"] == 1.0
        env.reset()  # a second episode: the task's snapshot swapped in
        *_, terminated, truncated, info = env.step("DONE")  # doing nothing scores 0
        assert (terminated, truncated, info["reward"]) == (True, False, 0.0)
    finally:
        env.close()


def test_the_vector_env_steps_8_sandboxes_concurrently(server: ServerProcess) -> None:
    envs = SandboxVectorEnv(str(TERMINAL_TASK), num_envs=8, target=server.grpc_target, token=TOKEN)
    try:
        obs, infos = envs.reset(seed=0)
        assert len(obs["text"]) == 8 and len(set(infos["sandbox_id"])) == 8
        started = time.monotonic()
        obs, rewards, terminations, truncations, infos = envs.step(['{"type": "exec", "cmd": "sleep 1; echo up"}'] * 8)
        took = time.monotonic() - started
        print(f"8 concurrent steps of `sleep 1` took {took:.2f}s")
        assert obs["text"] == ("up\n",) * 8 and not terminations.any() and not rewards.any()
        assert 1.0 <= took < 3.0, f"8 steps of 1 s took {took:.2f}s: not concurrent"
        # One sub-env's action is not one: it alone answers with the error, and the others' steps are done.
        obs, rewards, terminations, truncations, infos = envs.step(
            ["not an action ("] + ['{"type": "exec", "cmd": "echo ok"}'] * 7
        )
        assert "pyautogui" in obs["text"][0] and obs["text"][1:] == ("ok\n",) * 7, obs["text"]
        assert not terminations.any() and not rewards.any()

        solve = '{"type": "exec", "cmd": "sort /workspace/names.txt > /workspace/sorted.txt"}'
        envs.step([solve] * 4 + ['{"type": "exec", "cmd": "true"}'] * 4)
        obs, rewards, terminations, truncations, infos = envs.step(["DONE"] * 8)
        assert rewards.tolist() == [1.0] * 4 + [0.0] * 4 and terminations.all() and not truncations.any()
        # The next step resets the ended sub-envs (gymnasium's NEXT_STEP autoreset): reward 0, a new episode.
        obs, rewards, terminations, truncations, infos = envs.step(["DONE"] * 8)
        assert not rewards.any() and not terminations.any() and set(infos["steps"]) == {0}
    finally:
        envs.close()
    with Client(server.grpc_target, token=TOKEN) as client:
        assert not {s.id for s in client.list()} & set(filter(None, infos["sandbox_id"]))


def test_make_vec_uses_the_sandbox_vector_env(server: ServerProcess) -> None:
    envs = gymnasium.make_vec(
        sandbox.gym.TASK_ENV_ID, num_envs=2, vectorization_mode="vector_entry_point", task=str(TERMINAL_TASK),
        target=server.grpc_target, token=TOKEN,
    )  # fmt: skip
    try:
        assert isinstance(envs.unwrapped, SandboxVectorEnv) and envs.num_envs == 2
        envs.reset()
        _, rewards, terminations, _, _ = envs.step(["FAIL", "FAIL"])
        assert terminations.all() and not rewards.any()
    finally:
        envs.close()


# ---------------------------------------------------------------------------- trajectories: replay, export, view


@pytest.fixture(scope="module")
def recorded(server: ServerProcess) -> dict[str, str]:
    """Trajectories of the demo (terminal tasks) and of a desktop task's reference solution."""
    demo = cli(server, "demo", "-n", "3", "-c", "3", "--kind", "terminal", "--tasks", str(TASKS))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "success rate" in demo.stdout and "100%" in demo.stdout, demo.stdout
    run = cli(server, "task", "run", str(DESKTOP_TASK))
    assert run.returncode == 0 and "reward 1" in run.stdout, run.stdout + run.stderr
    with Client(server.grpc_target, token=TOKEN) as client:
        found = [t for t in client.trajectories.list() if t.reward == 1.0 and t.reason == "done"]
    terminal = next(t.id for t in found if t.kind.value == "terminal")
    desktop = next(t.id for t in found if t.task_id == "desktop-xterm-hello")
    return {"terminal": terminal, "desktop": desktop}


@pytest.mark.parametrize("kind", ["terminal", "desktop"])
def test_a_recorded_trajectory_replays_to_the_same_reward(
    server: ServerProcess, recorded: dict[str, str], kind: str
) -> None:
    replayed = cli(server, "trajectory", "replay", recorded[kind], "--tasks", str(TASKS))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "reward 1 (original 1)" in replayed.stdout
    with Client(server.grpc_target, token=TOKEN) as client:
        again = client.trajectories.get(replayed.stdout.split(" as ")[1].split()[0])
        original = client.trajectories.get(recorded[kind])
    assert again.info.reward == 1.0 and again.info.task_id == original.info.task_id
    assert [s.action for s in again.steps] == [s.action for s in original.steps]


def test_trajectories_export_to_parquet(server: ServerProcess, recorded: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "rollouts.parquet"
    exported = cli(server, "trajectory", "export", recorded["terminal"], recorded["desktop"], "-o", str(out))
    assert exported.returncode == 0, exported.stdout + exported.stderr
    steps = pd.read_parquet(out)
    with Client(server.grpc_target, token=TOKEN) as client:
        lengths = {t: len(client.trajectories.get(t).steps) for t in recorded.values()}
    assert len(steps) == sum(lengths.values())
    assert steps.groupby("trajectory_id").size().to_dict() == lengths
    ends = steps[steps.done]
    assert sorted(ends.trajectory_id) == sorted(recorded.values()) and set(ends.reward) == {1.0}
    desktop = steps[steps.trajectory_id == recorded["desktop"]]
    assert desktop.frame_sha256.notna().all() and set(desktop.width) == {1280}
    frames = pd.read_parquet(out.with_name("rollouts.frames.parquet"))
    assert set(desktop.frame_sha256) == set(frames.sha256) and frames.data.map(len).gt(1000).all()


def test_the_web_view_replays_a_trajectory_step_by_step(
    server: ServerProcess, recorded: dict[str, str], tmp_path: Path
) -> None:
    trajectory_id = recorded["desktop"]
    with Client(server.grpc_target, token=TOKEN) as client:
        steps = client.trajectories.get(trajectory_id).steps
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1500, "height": 900}).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{server.http_url}/view?token={TOKEN}")
            link = page.locator(f"[data-trajectory='{trajectory_id}'] a")
            link.wait_for(timeout=20_000)
            link.click()
            page.wait_for_url(f"{server.http_url}/view/trajectories/{trajectory_id}")
            page.wait_for_function("window.trajectoryReplay && window.trajectoryReplay.ready", timeout=20_000)
            assert page.locator("#steps li").count() == len(steps)
            assert "desktop-xterm-hello" in page.locator("#facts").inner_text()
            page.wait_for_function("document.getElementById('frame').naturalWidth === 1280", timeout=10_000)
            page.keyboard.press("ArrowRight")
            assert page.evaluate("window.trajectoryReplay.index") == 1
            assert "exec" in page.locator("#steps li.current").inner_text()
            page.click("#last")
            assert "reward 1" in page.locator("#step-status").inner_text()
            page.screenshot(path=str(tmp_path / "replay.png"))
            assert not errors, errors

            other = browser.new_context().new_page()
            other.goto(f"{server.http_url}/view?token={OTHER_TOKEN}")
            response = other.goto(f"{server.http_url}/view/trajectories/{trajectory_id}")
            assert response is not None and response.status == 404
            assert other.request.get(f"{server.http_url}/view/api/trajectories/{trajectory_id}").status == 404
            listed = other.request.get(f"{server.http_url}/view/api/trajectories").json()
            assert trajectory_id not in {t["id"] for t in listed["trajectories"]}
        finally:
            browser.close()
    anonymous = httpx.get(f"{server.http_url}/view/trajectories/{trajectory_id}")
    assert anonymous.status_code == 401
