"""Kept for old imports: the envs are gymnasium envs now, in :mod:`sandbox.gym` (``pip install 'sandbox[gym]'``)."""

from sandbox.gym import SandboxEnv, SandboxTaskEnv, SandboxVectorEnv
from sandbox.gym.env import RewardFn

__all__ = ["RewardFn", "SandboxEnv", "SandboxTaskEnv", "SandboxVectorEnv"]
