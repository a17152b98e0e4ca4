"""The tasks' one error: a task that cannot run here, or a step of it that failed. Below every module of the package,
since each of them raises it."""

from __future__ import annotations

from sandbox.errors import InvalidArgument


class TaskError(InvalidArgument):
    """A task that cannot run here, or a step of it that failed. ``problems`` lists every reason found."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems) if problems else [message]
