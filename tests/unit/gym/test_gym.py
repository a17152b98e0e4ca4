"""The gymnasium envs without an engine: their spaces and conversions, and ``check_env`` on the task-less env over
the fake backend (real agents as local subprocesses) behind a real gRPC server on 127.0.0.1. The task envs and the
vector env against real sandboxes: ``tests/docker/test_rollouts.py``."""

from __future__ import annotations

import asyncio
import io
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

import sandbox.gym
from sandbox.errors import InvalidArgument
from sandbox.gym import spaces
from sandbox.models import ExecResult, Observation, Screenshot, ScreenSize
from tests.unit.conftest import ALPHA_TOKEN

SMALL = ScreenSize(width=320, height=200)


def _png(colour: tuple[int, int, int], size: tuple[int, int] = (320, 200)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def test_the_ids_are_registered_with_a_vector_entry_point() -> None:
    assert set(sandbox.gym.ENV_IDS) <= set(gymnasium.envs.registration.registry)
    spec = gymnasium.spec(sandbox.gym.TASK_ENV_ID)
    assert spec.vector_entry_point == "sandbox.gym.vector:SandboxVectorEnv" and spec.nondeterministic
    sandbox.gym.register_envs()  # idempotent


def test_observation_spaces_by_kind() -> None:
    terminal = spaces.observation_space(None)
    assert set(terminal.spaces) == {"text"}
    desktop = spaces.observation_space(SMALL)
    box = desktop.spaces["screenshot"]
    assert isinstance(box, gymnasium.spaces.Box) and box.shape == (200, 320, 3) and box.dtype == np.uint8
    assert {"text": "héllo\n\tworld ✓ 中文"} in terminal
    assert {"text": "x" * (spaces.MAX_TEXT + 1)} not in terminal


def test_observations_convert_into_the_spaces() -> None:
    obs = Observation(
        exec=ExecResult(exit_code=0, stdout="out 🙂\n", stderr="err\n"),
        screenshot=Screenshot(data=_png((0, 255, 0)), width=320, height=200, format="png"),
    )
    converted = spaces.to_gym(obs, SMALL)
    assert converted["text"] == "out \ufffd\nerr\n"
    assert converted["screenshot"].shape == (200, 320, 3) and converted["screenshot"][5, 5].tolist() == [0, 255, 0]
    assert converted in spaces.observation_space(SMALL)
    blank = spaces.to_gym(None, SMALL, text="error: nope")
    assert blank["text"] == "error: nope" and not blank["screenshot"].any()
    assert spaces.clean_text("a" * 10 + "end", limit=5) == "aaend"
    wrong = Observation(screenshot=Screenshot(data=_png((0, 0, 0), (640, 400)), width=640, height=400, format="png"))
    with pytest.raises(InvalidArgument, match="640x400"):
        spaces.to_gym(wrong, SMALL)
    frame = spaces.render_text("line one\nline two")
    assert frame.shape == (480, 800, 3) and frame.dtype == np.uint8 and frame.any()


def test_actions_are_json_pyautogui_or_specials() -> None:
    assert spaces.parse_action('{"type": "click", "x": 3, "y": 4}').type == "click"
    assert spaces.parse_action("pyautogui.click(3, 4)").type == "pyautogui"
    assert spaces.parse_action(" DONE ").type == "done" and spaces.parse_action("FAIL").type == "fail"
    assert spaces.parse_action({"type": "exec", "cmd": "ls"}).type == "exec"
    for bad, why in (("", "empty"), ('{"type": "click"', "not"), ('{"type": "fly"}', "action")):
        with pytest.raises(InvalidArgument, match=why):
            spaces.parse_action(bad)
    text = spaces.action_space()
    assert "pyautogui.typewrite('naïve 中文')" in text


def _check_the_sandbox_env(target: str) -> list[tuple[str, float, bool, bool]]:
    env = gymnasium.make(
        sandbox.gym.SANDBOX_ENV_ID, kind="terminal", target=target, token=ALPHA_TOKEN, max_steps=3,
        spec={"labels": {"test": "gym"}}, render_mode="rgb_array",
    )  # fmt: skip
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # check_env warns about what it finds wrong: none of that here
            check_env(env.unwrapped)
        obs, info = env.reset(seed=1)
        assert obs == {"text": ""} and info["sandbox_id"].startswith("sb-term-")
        outcomes = []
        for action in (
            '{"type": "exec", "cmd": "echo $((6*7))"}',
            "not an action (",
            '{"type": "exec", "cmd": "true"}',
        ):
            obs, reward, terminated, truncated, info = env.step(action)
            outcomes.append((obs["text"][:40], reward, terminated, truncated))
        frame = env.render()
        assert isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.shape[2] == 3
        return outcomes
    finally:
        env.close()


async def test_check_env_passes_on_the_sandbox_env(target: str) -> None:
    outcomes = await asyncio.to_thread(_check_the_sandbox_env, target)
    assert outcomes[0] == ("42\n", 0.0, False, False)
    print(outcomes[1][0])
    assert "pyautogui" in outcomes[1][0]  # the error, for the agent to read
    assert outcomes[1][1:] == (0.0, False, False)  # not done, not counted
    assert outcomes[2] == ("", 0.0, False, False)
