"""``sandbox demo``: scripted rollouts of the sample tasks (their reference solutions) against a control plane, in
parallel, with live progress; then the success rate, episodes/s, steps/s and the step and reset latencies.

Each of ``concurrency`` workers keeps one sandbox per kind and resets it to its next task, as a rollout worker
does: the first reset to a task runs its setup and snapshots it, later ones swap a warm replica in. Display kinds
step with a screenshot, as an agent that looks at the screen would. :func:`run_demo` is the same without the
command (the bench's ``tasks`` section uses it).

``sandbox demo live`` (``make run`` runs it after the demo) keeps a desktop, a browser showing a game and a terminal
running for the web view until SIGINT, SIGTERM or SIGHUP, then deletes them (:func:`start_live`, :func:`hold_live`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from sandbox.cli.common import DEFAULT_TARGET, EXIT_ERROR, TargetOpt, TokenOpt, console, err_console, fail
from sandbox.errors import NotFound, SandboxError

if TYPE_CHECKING:
    from sandbox.client import AsyncClient, AsyncSandbox
    from sandbox.models import Action, Observation
    from sandbox.tasks.model import Task

demo_app = typer.Typer(help="Scripted rollouts of the sample tasks, with live progress and the rates.")
SOLUTION = ".solution.jsonl"


@dataclass(frozen=True)
class Scripted:
    """A task and its reference solution."""

    task: Task
    actions: list[Action]


OPT_IN_KINDS = frozenset({"android"})
"""Kinds the demo runs only when asked by name: an android sandbox needs KVM and an image built from a local SDK."""


def load_scripted(folder: str | Path, kinds: set[str] | None = None) -> list[Scripted]:
    """The tasks of ``folder`` (recursively) that have a reference solution beside them, by file name; with no
    ``kinds``, those of every kind but ``OPT_IN_KINDS``."""
    from sandbox.tasks.actions import load_actions
    from sandbox.tasks.model import Task

    found = []
    for solution in sorted(Path(folder).rglob(f"*{SOLUTION}")):
        task = Task.from_file(solution.with_name(solution.name.removesuffix(SOLUTION) + ".json"))
        kind = task.sandbox.kind.value
        if (kind in kinds) if kinds is not None else (kind not in OPT_IN_KINDS):
            found.append(Scripted(task, load_actions(solution)))
    return found


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclass
class DemoStats:
    episodes: int = 0
    successes: int = 0
    steps: int = 0
    wall_s: float = 0.0
    step_s: list[float] = field(default_factory=list)
    reset_warm_s: list[float] = field(default_factory=list)
    """Resets that swapped the task's snapshot in."""
    reset_setup_s: list[float] = field(default_factory=list)
    """Resets that ran (some of) the task's setup."""
    rewards: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def reset_s(self) -> list[float]:
        return self.reset_warm_s + self.reset_setup_s

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s if self.wall_s else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s else 0.0


Event = Callable[[int, str, Any], None]
"""``on_event(worker, what, detail)``: ``"start"`` (task id), ``"step"`` ((index, total)), ``"end"`` (reward)."""


class _Worker:
    def __init__(
        self, number: int, client: AsyncClient, stats: DemoStats, on_event: Event | None, firsts: dict[str, Any]
    ) -> None:
        self.number, self.client, self.stats, self.on_event = number, client, stats, on_event
        self.sandboxes: dict[str, AsyncSandbox] = {}
        self.firsts = firsts
        """A lock per task id, held through the task's first reset (its setup and snapshot), so that a second
        worker on the same task swaps the snapshot in instead of running the same setup at the same time."""

    async def _reset(self, sandbox: AsyncSandbox, task: Task) -> Observation:
        lock = self.firsts.setdefault(task.id, asyncio.Lock())
        if lock is None:
            return await sandbox.reset(task=task)
        async with lock:
            obs = await sandbox.reset(task=task)
            self.firsts[task.id] = None
            return obs

    def _say(self, what: str, detail: Any) -> None:
        if self.on_event is not None:
            self.on_event(self.number, what, detail)

    async def _sandbox(self, task: Task) -> AsyncSandbox:
        kind = task.sandbox.kind.value
        if kind not in self.sandboxes:
            labels = {"sandbox.demo": "1"}
            screen = task.sandbox.screen.model_dump() if task.sandbox.screen else None
            spec: dict[str, Any] = {"labels": labels, **({"screen": screen} if screen else {})}
            self.sandboxes[kind] = await self.client.create(kind, **spec)
        return self.sandboxes[kind]

    async def episode(self, scripted: Scripted) -> None:
        task = scripted.task
        self._say("start", task.id)
        sandbox = await self._sandbox(task)
        display = task.sandbox.kind.has_display
        try:
            started = time.perf_counter()
            obs = await self._reset(sandbox, task)
            took = time.perf_counter() - started
            (self.stats.reset_setup_s if obs.info.get("setup_ran") else self.stats.reset_warm_s).append(took)
            for index, action in enumerate(scripted.actions, 1):
                started = time.perf_counter()
                obs = await sandbox.step(action, screenshot=display)
                self.stats.step_s.append(time.perf_counter() - started)
                self.stats.steps += 1
                self._say("step", (index, len(scripted.actions)))
                if obs.done:
                    break
            reward = await sandbox.evaluate()
        except SandboxError as e:
            self.stats.errors.append(f"{task.id}: {e.code}: {e.message}")
            self.sandboxes.pop(task.sandbox.kind.value, None)
            with contextlib.suppress(SandboxError):
                await sandbox.close()
            reward = 0.0
        self.stats.episodes += 1
        self.stats.successes += reward >= 1.0
        self.stats.rewards.setdefault(task.id, []).append(reward)
        self._say("end", reward)

    async def close(self) -> None:
        for sandbox in self.sandboxes.values():
            with contextlib.suppress(SandboxError):
                await sandbox.close()
        self.sandboxes.clear()


async def run_demo(
    client: AsyncClient,
    plan: list[Scripted],
    *,
    episodes: int,
    concurrency: int,
    on_event: Event | None = None,
) -> DemoStats:
    """``episodes`` scripted episodes over ``plan`` (in turn), ``concurrency`` at a time."""
    stats = DemoStats()
    queue: asyncio.Queue[Scripted] = asyncio.Queue()
    for i in range(episodes):
        queue.put_nowait(plan[i % len(plan)])
    firsts: dict[str, Any] = {}
    workers = [_Worker(n, client, stats, on_event, firsts) for n in range(max(1, min(concurrency, episodes)))]

    async def work(worker: _Worker) -> None:
        while not queue.empty():
            await worker.episode(queue.get_nowait())

    started = time.perf_counter()
    try:
        await asyncio.gather(*(work(w) for w in workers))
    finally:
        stats.wall_s = time.perf_counter() - started
        await asyncio.gather(*(w.close() for w in workers))
    return stats


def _ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def summary(stats: DemoStats) -> Table:
    table = Table("measure", "value", title="demo", box=None, title_justify="left")
    rows = [
        ("episodes", f"{stats.episodes} ({stats.successes} reward 1)"),
        ("success rate", f"{stats.success_rate:.0%}"),
        ("episodes/s", f"{stats.episodes_per_s:.2f}"),
        ("steps/s", f"{stats.steps_per_s:.1f}"),
        ("step p50 / p99", f"{_ms(percentile(stats.step_s, 50))} / {_ms(percentile(stats.step_s, 99))}"),
        ("reset p50 / p99", f"{_ms(percentile(stats.reset_s, 50))} / {_ms(percentile(stats.reset_s, 99))}"),
        ("  warm (snapshot swapped in)", f"{len(stats.reset_warm_s)}, p50 {_ms(percentile(stats.reset_warm_s, 50))}"),
        ("  setup run", f"{len(stats.reset_setup_s)}, p50 {_ms(percentile(stats.reset_setup_s, 50))}"),
        ("wall time", f"{stats.wall_s:.1f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


@demo_app.callback(invoke_without_command=True)
def demo(
    ctx: typer.Context,
    episodes: Annotated[int | None, typer.Option("-n", "--episodes", help="Episodes (default: 2 per task).")] = None,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", help="Episodes at a time.")] = 4,
    tasks: Annotated[Path, typer.Option(help="Folder of tasks with <id>.solution.jsonl beside them.")] = Path("tasks"),
    kinds: Annotated[
        list[str] | None, typer.Option("--kind", help="Only tasks of this kind (repeat for several).")
    ] = None,
    target: TargetOpt = DEFAULT_TARGET,
    token: TokenOpt = None,
) -> None:
    """Run scripted rollouts of the sample tasks (their reference solutions) in parallel, with live progress, and
    print the success rate, episodes/s, steps/s and the p50/p99 step and reset latencies. Open the web view
    meanwhile to watch them."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sandbox.client import AsyncClient

    try:
        plan = load_scripted(tasks, set(kinds) if kinds else None)
        left_out = (
            sorted({s.task.sandbox.kind.value for s in load_scripted(tasks, set(OPT_IN_KINDS))}) if not kinds else []
        )
    except SandboxError as e:
        err_console.print(f"[red]error[/red]: {escape(e.message)}")
        raise typer.Exit(2) from None
    if left_out:
        err_console.print(
            f"not running the {', '.join(left_out)} tasks: ask for them with --kind (an android sandbox needs KVM "
            "and an image built from an Android SDK, docs/android.md)"
        )
    if not plan:
        err_console.print(f"no tasks with a {SOLUTION} in {tasks}: run it from the repository or pass --tasks")
        raise typer.Exit(2)
    total = episodes if episodes is not None else 2 * len(plan)
    workers = max(1, min(concurrency, total))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        overall = progress.add_task("episodes (reward 1: 0)", total=total)
        lanes = [progress.add_task(f"  worker {n + 1}: starting", total=1) for n in range(workers)]
        names: dict[int, str] = {}
        wins = [0]

        def on_event(worker: int, what: str, detail: Any) -> None:
            lane = lanes[worker]
            if what == "start":
                names[worker] = str(detail)
                progress.update(lane, description=f"  worker {worker + 1}: {detail}", completed=0, total=None)
            elif what == "step":
                index, steps = detail
                progress.update(lane, completed=index, total=steps)
            else:
                wins[0] += detail >= 1.0
                progress.update(lane, description=f"  worker {worker + 1}: {names[worker]} → reward {detail:g}")
                progress.update(overall, advance=1, description=f"episodes (reward 1: {wins[0]})")

        async def go() -> DemoStats:
            async with AsyncClient(target, token=token, timeout=600) as client:
                return await run_demo(client, plan, episodes=total, concurrency=workers, on_event=on_event)

        try:
            stats = asyncio.run(go())
        except SandboxError as e:
            fail(e)
    console.print(summary(stats))
    per_task = Table("task", "episodes", "mean reward", box=None)
    for task_id, rewards in sorted(stats.rewards.items()):
        per_task.add_row(task_id, str(len(rewards)), f"{sum(rewards) / len(rewards):.2f}")
    console.print(per_task)
    for error in stats.errors:
        err_console.print(f"[red]error[/red]: {escape(error)}", soft_wrap=True)
    if stats.errors:
        raise typer.Exit(1)


LIVE_KINDS = ("desktop", "browser", "terminal")
LIVE_LABELS = {"sandbox.demo": "live"}
LIVE_GAME, LIVE_SEED = "tiles", 7
LIVE_LEASE_S = 600.0
"""The live sandboxes' lease, renewed every ``LIVE_RENEW_S`` while they are held: a holder killed without a chance
to delete them (SIGKILL) leaves them for this long at most."""
LIVE_RENEW_S = 60.0
DEFAULT_VIEW = "http://127.0.0.1:8080/view"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What ends ``sandbox demo live``: Ctrl-C, a kill, a closed terminal."""
LIVE_PAGE_CLICK = {"type": "click", "x": 1000, "y": 700}
"""A click on the game's page, clear of the game, that gives it the keyboard."""
LIVE_SHELL_GREETING = "echo 'a live terminal sandbox: sandbox exec <id> -- CMD'; uname -srm; ls -la /workspace"


async def start_live(client: AsyncClient) -> list[AsyncSandbox]:
    """One sandbox of each of ``LIVE_KINDS``, made at once, the browser showing the game ``LIVE_GAME`` and the
    terminal a command's output: all of them, or none (what was made is deleted and the first error raised)."""
    from sandbox.games import GAMES

    spec: dict[str, Any] = {"labels": LIVE_LABELS, "ttl_s": LIVE_LEASE_S}
    made = await asyncio.gather(*(client.create(kind, **spec) for kind in LIVE_KINDS), return_exceptions=True)
    sandboxes = [sb for sb in made if not isinstance(sb, BaseException)]
    try:
        failed = next((e for e in made if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed
        browser, terminal = (sandboxes[LIVE_KINDS.index(kind)] for kind in ("browser", "terminal"))
        await browser.step({"type": "navigate", "url": GAMES[LIVE_GAME].url(seed=LIVE_SEED)})
        await browser.step(LIVE_PAGE_CLICK)  # the keyboard to the page, off the address bar, for the VNC session
        await terminal.exec(LIVE_SHELL_GREETING)  # something on its thumbnail
    except BaseException:
        await close_live(sandboxes)
        raise
    return sandboxes


async def hold_live(sandboxes: list[AsyncSandbox], stop: asyncio.Event, *, renew_s: float = LIVE_RENEW_S) -> None:
    """Renew the sandboxes' leases every ``renew_s`` until ``stop`` is set; a sandbox deleted meanwhile (from the
    web view, ``sandbox rm``) is dropped from ``sandboxes``, and with none left this returns."""
    while sandboxes and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), renew_s)
        if stop.is_set():
            return
        for sandbox in list(sandboxes):
            try:
                await sandbox.renew(LIVE_LEASE_S)
            except NotFound:
                sandboxes.remove(sandbox)
                console.print(f"==> {_kind(sandbox)} {sandbox.id} is gone (deleted elsewhere)", highlight=False)


async def close_live(sandboxes: list[AsyncSandbox]) -> dict[str, bool]:
    """Delete them all at once, one that cannot be deleted (said on stderr) keeping none of the others: id ->
    deleted."""
    results = await asyncio.gather(*(sb.close() for sb in sandboxes), return_exceptions=True)
    for sandbox, result in zip(sandboxes, results, strict=True):
        if isinstance(result, BaseException):
            err_console.print(f"[red]error[/red]: could not delete {sandbox.id}: {escape(str(result))}")
    return {sb.id: not isinstance(result, BaseException) for sb, result in zip(sandboxes, results, strict=True)}


async def live_session(
    client: AsyncClient, stop: asyncio.Event, *, view: str = DEFAULT_VIEW, renew_s: float = LIVE_RENEW_S
) -> dict[str, bool]:
    """``sandbox demo live`` without the signals: start the live sandboxes, say where they are, hold them until
    ``stop`` is set (or every one was deleted elsewhere), then delete those left: id -> deleted."""
    from sandbox.games import GAMES

    sandboxes = await start_live(client)
    try:
        if not stop.is_set():
            what = {
                "desktop": "its panel opens a terminal, in the web view's VNC session",
                "browser": f"{GAMES[LIVE_GAME].title} (seed {LIVE_SEED}): arrow keys in the VNC session",
                "terminal": "a shell: sandbox exec <id> -- ls",
            }
            say = f"==> {len(sandboxes)} sandboxes stay live for the web view until Ctrl-C: {view}"
            console.print(say, highlight=False, soft_wrap=True)
            for sandbox in sandboxes:
                line = f"    {_kind(sandbox):<9} {sandbox.id}   {what.get(_kind(sandbox), '')}"
                console.print(line, highlight=False, soft_wrap=True)
            await hold_live(sandboxes, stop, renew_s=renew_s)
    except BaseException:
        await close_live(sandboxes)
        raise
    return await close_live(sandboxes)


def _kind(sandbox: AsyncSandbox) -> str:
    return sandbox.info.kind.value


@demo_app.command("live")
def live(
    target: Annotated[str, typer.Option("--target", envvar="SANDBOX_TARGET", help="gRPC address.")] = DEFAULT_TARGET,
    token: Annotated[str | None, typer.Option("--token", envvar="SANDBOX_TOKEN", help="Bearer token.")] = None,
    view: Annotated[str, typer.Option("--view", help="The web view's URL, to print.")] = DEFAULT_VIEW,
) -> None:
    """Keep a desktop, a browser showing a game and a terminal running for the web view until Ctrl-C.

    Their thumbnails and VNC sessions are in the web view; at Ctrl-C (SIGINT), SIGTERM or SIGHUP they are deleted.
    Their leases are renewed meanwhile, so a holder killed outright leaves them for 10 minutes at most."""
    from sandbox.client import AsyncClient

    async def go() -> dict[str, bool]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:  # and a second Ctrl-C does not cut the deletion short
            loop.add_signal_handler(signum, stop.set)
        try:
            async with AsyncClient(target, token=token, timeout=600) as client:
                return await live_session(client, stop, view=view)
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)

    try:
        deleted = asyncio.run(go())
    except SandboxError as e:
        fail(e)
    if any(deleted.values()):
        ids = ", ".join(i for i, done in deleted.items() if done)
        console.print(f"==> deleted the live sandboxes: {ids}", highlight=False, soft_wrap=True)
    if not all(deleted.values()):  # said on stderr
        raise typer.Exit(EXIT_ERROR)
