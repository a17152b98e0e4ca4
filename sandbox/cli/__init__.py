"""The `sandbox` command: run the control plane, build images, and drive sandboxes through the SDK."""

from sandbox.cli.common import guarded
from sandbox.cli.sandboxes import app


def main() -> None:
    guarded(app)


__all__ = ["app", "main"]
