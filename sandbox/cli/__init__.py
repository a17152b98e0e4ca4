"""The `sandbox` command: run the control plane, build images, and drive sandboxes through the SDK.

The command tree is put together here, from one module per group: :mod:`~sandbox.cli.server`,
:mod:`~sandbox.cli.sandboxes` (create, ls, exec, step, shot, reset, rm, logs, url), :mod:`~sandbox.cli.capacity`,
:mod:`~sandbox.cli.images`, :mod:`~sandbox.cli.tasks`, :mod:`~sandbox.cli.trajectories` and :mod:`~sandbox.cli.demo`;
what they share (``--target``, ``--token``, the client, error reports) is :mod:`~sandbox.cli.common`.
``main`` is the console script's entry point (``sandbox.cli:main``).
"""

import typer

from sandbox.cli import capacity, sandboxes, server
from sandbox.cli.common import guarded
from sandbox.cli.demo import demo_app
from sandbox.cli.images import images_app
from sandbox.cli.tasks import task_app
from sandbox.cli.trajectories import trajectory_app

app = typer.Typer(help="Sandboxes for GUI-agent RL rollouts.", no_args_is_help=True, add_completion=False)
app.command("capacity")(capacity.capacity)
app.command("server")(server.server)
app.command("create")(sandboxes.create)
app.command("ls")(sandboxes.list_sandboxes)
app.command("exec")(sandboxes.exec_command)
app.command("step")(sandboxes.step)
app.command("shot")(sandboxes.shot)
app.command("reset")(sandboxes.reset)
app.command("rm")(sandboxes.remove)
app.command("logs")(sandboxes.logs)
app.command("url")(sandboxes.preview_url)
app.add_typer(images_app, name="images")
app.add_typer(task_app, name="task")
app.add_typer(trajectory_app, name="trajectory")
app.add_typer(demo_app, name="demo")


def main() -> None:
    guarded(app)


__all__ = ["app", "main"]
