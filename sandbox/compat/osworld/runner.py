"""OSWorld task files run through OSWorld's own harness on the platform, each scored twice: by OSWorld's
``evaluate()`` and by the platform's task layer on the same end state.

    .venv-osworld/bin/python -m sandbox.compat.osworld --target 127.0.0.1:50051 tasks/osworld/*.json

One ``DesktopEnv`` (one desktop sandbox) serves many tasks, reset between runs; ``--parallel N`` runs N
environments at once from this process, one thread each (as OSWorld's parallel runners do), sharing the runs.
For each task and run (``solved``: the reference solution beside it, ``<task>.solution.jsonl``, its pyautogui code and
``WAIT``/``DONE``/``FAIL`` given to ``step``; ``unsolved``: one ``WAIT``) it prints one JSON line: both rewards and
the time ``reset``, the steps and ``evaluate`` took. The files tasks download come from their fixtures (the
``fixtures/`` folder beside them) through desktop-env's own cache (:mod:`.cache`): nothing is fetched.
``--bench N``: instead, N times ``reset`` to the first task and one ``step`` (its solution's first action), timed.

The platform's side (:class:`SdkRuntime`) is ``sandbox.tasks.evaluate`` — the code ``sandbox.evaluate()`` runs in
the control plane — over the SDK instead of the agent: the same commands, reached by ``exec`` and ``files``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from sandbox.client import Client, Sandbox
from sandbox.compat.osworld.cache import seed_download_cache
from sandbox.compat.osworld.env import make_env
from sandbox.errors import InvalidArgument, NotFound, PermissionDenied
from sandbox.models import ExecResult, SandboxKind
from sandbox.tasks import Fixtures, Task, evaluate
from sandbox.tasks.scripts import CDP

SPECIAL = ("WAIT", "DONE", "FAIL")
RUNS = ("solved", "unsolved")


class SdkRuntime:
    """The platform's task runtime (``sandbox.tasks.TaskRuntime``) over the SDK: read-only, for evaluation."""

    kind = SandboxKind.DESKTOP

    def __init__(self, sandbox: Sandbox) -> None:
        self.sb = sandbox
        spec = sandbox.refresh().spec
        self.screen_width, self.screen_height = spec.screen.width, spec.screen.height

    async def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float = 60,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        keep_background: bool = False,
    ) -> ExecResult:
        return await asyncio.to_thread(
            self.sb.exec, cmd, timeout=timeout, cwd=cwd, env=env, keep_background=keep_background
        )

    async def read_file(self, path: str) -> bytes:
        try:
            return await asyncio.to_thread(self.sb.files.read, path)
        except PermissionDenied:
            pass  # outside the file API's roots (~/Desktop): as the control plane does, through a command
        result = await self.exec(["base64", "-w0", "--", path])
        if result.exit_code != 0:
            raise NotFound(f"cannot read {path} in the sandbox: {result.stderr.strip() or 'no such file'}")
        return base64.b64decode(result.stdout)

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int:
        raise InvalidArgument("an evaluation writes no files (a postconfig step would: not supported here)")

    async def browser_tabs(self) -> list[dict[str, Any]]:
        result = await self.exec(["python3", "-c", CDP, "list"], timeout=30)
        if result.exit_code != 0:
            raise NotFound(f"the sandbox's browser does not answer: {result.stderr.strip()}")
        tabs: list[dict[str, Any]] = json.loads(result.stdout)
        return tabs

    async def browser_info(self) -> dict[str, Any]:
        tabs = await self.browser_tabs()
        return tabs[0] if tabs else {}

    async def navigate(self, url: str) -> dict[str, Any]:
        raise InvalidArgument("an evaluation navigates nowhere")

    async def evaluate_js(self, expression: str) -> Any:
        raise InvalidArgument("browser_evaluate is not supported over the SDK runtime")


def solution_actions(task_file: Path) -> list[str]:
    """The reference solution beside ``task_file`` as the harness's actions: pyautogui code and special words."""
    solution = task_file.with_name(task_file.name.removesuffix(".json") + ".solution.jsonl")
    out = []
    for line in solution.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        kind = str(action.get("type", ""))
        if kind == "pyautogui":
            out.append(str(action["code"]))
        elif kind.upper() in SPECIAL:
            out.append(kind.upper())
        else:
            raise InvalidArgument(f"{solution.name}: the harness takes pyautogui code and WAIT/DONE/FAIL, not {kind!r}")
    return out


def run_task(env: Any, task_file: Path, run: str, fixtures: Fixtures, cache: Path, *, pause: float) -> dict[str, Any]:
    """One run of one task through the harness, scored by OSWorld and by the platform."""
    config: dict[str, Any] = json.loads(task_file.read_text(encoding="utf-8"))
    seed_download_cache(config, cache, fixtures)
    started = time.monotonic()
    env.reset(task_config=config)
    reset_s = time.monotonic() - started
    actions = solution_actions(task_file) if run == "solved" else ["WAIT"]
    started = time.monotonic()
    for action in actions:
        env.step(action, pause=pause)
    step_s = time.monotonic() - started
    started = time.monotonic()
    osworld = float(env.evaluate())
    evaluate_s = time.monotonic() - started
    last = actions[-1] if actions and actions[-1] in SPECIAL else None
    sandbox: Sandbox = env.provider.sandbox
    result = asyncio.run(evaluate(Task.from_dict(config), SdkRuntime(sandbox), fixtures, last_action=last))
    return {
        "task": config["id"],
        "run": run,
        "osworld": osworld,
        "platform": result.reward,
        "details": [d.model_dump(mode="json") for d in result.details],
        "reset_s": round(reset_s, 3),
        "step_s": round(step_s, 3),
        "evaluate_s": round(evaluate_s, 3),
        "steps": len(actions),
        "sandbox": sandbox.id,
    }


def bench_task(
    env: Any, task_file: Path, fixtures: Fixtures, cache: Path, samples: int, action: str | None = None
) -> dict[str, Any]:
    """``samples`` times: ``reset`` to the task, then one ``step`` (``action``, else the solution's first one; no
    pause)."""
    config: dict[str, Any] = json.loads(task_file.read_text(encoding="utf-8"))
    seed_download_cache(config, cache, fixtures)
    action = action or solution_actions(task_file)[0]
    resets, steps = [], []
    for _ in range(samples):
        started = time.monotonic()
        env.reset(task_config=config)
        resets.append(time.monotonic() - started)
        started = time.monotonic()
        env.step(action, pause=0)
        steps.append(time.monotonic() - started)
    return {"bench": config["id"], "reset_s": resets, "step_s": steps, "action": action}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.compat.osworld", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="the control plane's gRPC address (SANDBOX_TARGET)")
    parser.add_argument("--token", help="an API token (SANDBOX_TOKEN)")
    parser.add_argument("--runs", default=",".join(RUNS), help="solved, unsolved or both (default)")
    parser.add_argument("--pause", type=float, default=0.5, help="DesktopEnv.step's pause after each action (s)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=800)
    parser.add_argument("--bench", type=int, default=0, metavar="N", help="time N resets + steps of the first task")
    parser.add_argument("--bench-action", help="the step --bench times (default: the solution's first action)")
    parser.add_argument("--parallel", type=int, default=1, help="environments at once, one thread each")
    parser.add_argument("--out", type=Path, help="write the JSON lines to this file (default: stdout)")
    parser.add_argument("tasks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if set(runs) - set(RUNS):
        parser.error(f"--runs takes {', '.join(RUNS)}")
    fixtures = Fixtures.load(args.tasks[0].parent)
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(args.out.open("w", encoding="utf-8")) if args.out else sys.stdout
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))  # desktop_env's own prints
        client = stack.enter_context(Client(args.target, token=args.token))
        _run(client, args, fixtures, _Lines(stream), runs)
    return 0


def _run(client: Client, args: argparse.Namespace, fixtures: Fixtures, out: _Lines, runs: list[str]) -> None:
    """The runs shared by ``--parallel`` environments (threads), or ``--bench`` in one."""
    work: queue.SimpleQueue[tuple[Path, str]] = queue.SimpleQueue()
    if not args.bench:
        for task_file in args.tasks:
            for run in runs:
                work.put((task_file, run))
    count = 1 if args.bench else max(1, args.parallel)
    workers = [
        threading.Thread(target=_worker, args=(client, args, fixtures, out, work, runs), name=f"env-{i}")
        for i in range(count)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


class _Lines:
    """JSON lines to one stream, whole, from many threads."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def emit(self, line: Mapping[str, Any]) -> None:
        with self.lock:
            self.stream.write(json.dumps(line) + "\n")
            self.stream.flush()


def _worker(
    client: Client,
    args: argparse.Namespace,
    fixtures: Fixtures,
    out: _Lines,
    work: queue.SimpleQueue[tuple[Path, str]],
    runs: list[str],
) -> None:
    """One environment (one sandbox), built in this thread, taking runs from ``work`` until it is empty."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.monotonic()
        try:
            env = make_env(
                client,
                action_space="pyautogui",
                require_a11y_tree=False,
                cache_dir=cache,
                screen_size=(args.width, args.height),
            )
        except Exception as e:
            out.emit({"event": "failed to start", "error": f"{type(e).__name__}: {e}"})
            return
        out.emit({"event": "started", "sandbox": env.path_to_vm, "start_s": round(time.monotonic() - started, 3)})
        try:
            if args.bench:
                out.emit(bench_task(env, args.tasks[0], fixtures, Path(cache), args.bench, args.bench_action))
                return
            while True:
                try:
                    task_file, run = work.get_nowait()
                except queue.Empty:
                    return
                try:
                    out.emit(run_task(env, task_file, run, fixtures, Path(cache), pause=args.pause))
                except Exception as e:  # reported; the next run goes on (its reset starts afresh)
                    out.emit({"task": task_file.stem, "run": run, "error": f"{type(e).__name__}: {e}"})
        finally:
            env.close()
