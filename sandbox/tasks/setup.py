"""Running a task's setup steps (``config``, and the evaluator's ``postconfig``) in a sandbox, in order, each by its
type's handler (:mod:`sandbox.tasks.setup_steps`), as OSWorld's setup controller does.

A step that fails raises :class:`TaskError` naming it (``config[2] (download)``); errors of the sandbox itself
(``Unavailable``, ``DeadlineExceeded``, ...) keep their class, with the step named in the message.
"""

from __future__ import annotations

from sandbox.errors import SandboxError
from sandbox.tasks.errors import TaskError
from sandbox.tasks.model import SetupStep, Task
from sandbox.tasks.runtime import Fixtures, StepContext, TaskRuntime
from sandbox.tasks.setup_steps import STEPS


async def run_setup(task: Task, runtime: TaskRuntime, fixtures: Fixtures, *, password: str = "password") -> None:
    """Run ``task.config`` in order. ``password`` is what ``{CLIENT_PASSWORD}`` stands for."""
    await run_steps(task.config, runtime, fixtures, password=password, where="config")


async def run_steps(
    steps: list[SetupStep], runtime: TaskRuntime, fixtures: Fixtures, *, password: str, where: str
) -> None:
    for index, step in enumerate(steps):
        label = f"{where}[{index}] ({step.type})"
        handler = STEPS.get(step.type)
        if handler is None:
            raise TaskError(f"{label}: unsupported setup type {step.type!r}")
        try:
            await handler(StepContext(runtime, fixtures, password, label), dict(step.parameters))
        except TaskError as e:
            raise TaskError(f"setup failed at {label}: {e.message}") from e
        except SandboxError as e:
            raise type(e)(f"setup failed at {label}: {e.message}") from e
