"""Sandbox orchestration for GUI-agent RL rollouts.

Kept import-free on purpose: ``sandbox.agent`` and ``sandbox.protocol`` are copied into
every sandbox image and must import under the image's plain python3.
"""

__version__ = "0.1.0"
