"""Tasks: OSWorld's task format, run in this platform's sandboxes.

- :mod:`~sandbox.tasks.model`: :class:`Task` (load, check, dump, digest); :mod:`~sandbox.tasks.errors`:
  :class:`TaskError`
- :mod:`~sandbox.tasks.runtime`: :class:`TaskRuntime` (what a sandbox must offer), :class:`Fixtures` (offline
  ``download`` URLs), the contexts a step's handler and a getter are given
- :mod:`~sandbox.tasks.setup`: :func:`run_setup` (``config`` steps), each by its type in
  :mod:`~sandbox.tasks.setup_steps`; :mod:`~sandbox.tasks.osworld`: OSWorld's paths, commands and placeholders
  mapped onto the sandboxes
- :mod:`~sandbox.tasks.evaluate`: :func:`evaluate` (postconfig, getters, metrics, ``conj``) ->
  :class:`EvaluationResult`; getters in :mod:`~sandbox.tasks.getters` (+ ``getters_chrome``), metrics in
  :mod:`~sandbox.tasks.metrics` (+ ``metrics_chrome``); :mod:`~sandbox.tasks.catalog` says what is supported
- :mod:`~sandbox.tasks.pyautogui`: :func:`translate` (OSWorld agents' pyautogui strings -> actions);
  :mod:`~sandbox.tasks.actions`: episode action files (``*.solution.jsonl``)

The modules are layered, each importing only those below it (import-linter's ``tasks-layers`` contract):
evaluate -> setup -> model -> catalog -> setup_steps | getters | metrics -> android | getters_chrome |
metrics_chrome -> transfer | matching | values -> osworld | scripts -> runtime -> errors; beside them, actions ->
pyautogui -> keys (``tasks-actions``). A task checks itself against the catalog when it is loaded, hence the model
above the step, getter and metric modules, which need no model.

This package runs on the control plane's side: it reaches a sandbox only through a :class:`TaskRuntime` and
imports neither the service, the API, the backends, the store nor the agent (an import-linter contract).
"""

from sandbox.tasks.actions import expand, load_actions, parse_action
from sandbox.tasks.errors import TaskError
from sandbox.tasks.evaluate import EvaluationResult, MetricDetail, evaluate
from sandbox.tasks.model import Evaluator, Getter, Limits, SandboxTarget, SetupStep, Task
from sandbox.tasks.pyautogui import Special, translate
from sandbox.tasks.runtime import Fixtures, TaskRuntime
from sandbox.tasks.setup import run_setup

__all__ = [
    "EvaluationResult",
    "Evaluator",
    "Fixtures",
    "Getter",
    "Limits",
    "MetricDetail",
    "SandboxTarget",
    "SetupStep",
    "Special",
    "Task",
    "TaskError",
    "TaskRuntime",
    "evaluate",
    "expand",
    "load_actions",
    "parse_action",
    "run_setup",
    "translate",
]
