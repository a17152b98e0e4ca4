"""Gymnasium envs over the platform's sandboxes (``pip install 'sandbox[gym]'``): client-side, like the SDK.

    import gymnasium, sandbox.gym

    env = gymnasium.make("sandbox/Task-v0", task="tasks/desktop-xterm-hello.json", target="127.0.0.1:50051",
                         render_mode="rgb_array")
    obs, info = env.reset(seed=0)          # obs["screenshot"]: (800, 1280, 3) uint8; obs["text"]: last output
    obs, reward, terminated, truncated, info = env.step("pyautogui.click(640, 400)")   # an OSWorld agent's output
    obs, reward, terminated, truncated, info = env.step('{"type": "DONE"}')           # reward: the evaluator's
    env.close()

Registered ids (every one ``nondeterministic``: a real machine's screen is not a function of the seed):

- ``sandbox/Task-v0``: :class:`SandboxTaskEnv` (``task=`` a Task, its dict or its file). Its vector entry point is
  :class:`SandboxVectorEnv`: ``gymnasium.make_vec("sandbox/Task-v0", num_envs=8,
  vectorization_mode="vector_entry_point", task=...)`` steps the 8 sandboxes concurrently in one event loop.
- ``sandbox/Sandbox-v0``: :class:`SandboxEnv` (``kind=``, ``reward_fn=``, ``max_steps=``), no task.

Spaces (:mod:`sandbox.gym.spaces`): observation ``Dict(text=Text, screenshot=Box(0, 255, (H, W, 3), uint8))``, the
screenshot only for display kinds (desktop, browser); action ``Text``: an action's JSON, pyautogui code, ``WAIT``,
``DONE`` or ``FAIL``. A text that is no action is not done (``info["error"]``, reward 0, not counted).
"""

from __future__ import annotations

import gymnasium

from sandbox.gym.env import SandboxEnv, SandboxTaskEnv
from sandbox.gym.vector import SandboxVectorEnv

TASK_ENV_ID = "sandbox/Task-v0"
SANDBOX_ENV_ID = "sandbox/Sandbox-v0"
ENV_IDS = (TASK_ENV_ID, SANDBOX_ENV_ID)


def register_envs() -> None:
    """Register the ids (done on import; idempotent)."""
    registry = gymnasium.envs.registration.registry
    if TASK_ENV_ID not in registry:
        gymnasium.register(
            TASK_ENV_ID,
            entry_point="sandbox.gym.env:SandboxTaskEnv",
            vector_entry_point="sandbox.gym.vector:SandboxVectorEnv",
            nondeterministic=True,
        )
    if SANDBOX_ENV_ID not in registry:
        gymnasium.register(SANDBOX_ENV_ID, entry_point="sandbox.gym.env:SandboxEnv", nondeterministic=True)


register_envs()

__all__ = [
    "ENV_IDS",
    "SANDBOX_ENV_ID",
    "TASK_ENV_ID",
    "SandboxEnv",
    "SandboxTaskEnv",
    "SandboxVectorEnv",
    "register_envs",
]
