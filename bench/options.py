"""How much each section measures: sample counts and bounds, for a full run or a ``--quick`` smoke run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

SECTION_NAMES = (
    "create",
    "burst",
    "admission",
    "step",
    "observe",
    "reset",
    "throughput",
    "preview",
    "density",
    "games",
    "tasks",
    "osworld",
    "k8s-scale",
)
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Options:
    sections: tuple[str, ...] = SECTION_NAMES
    quick: bool = False
    output: Path = RESULTS_DIR

    create_samples: int = 15
    """Per kind and path (cold, warm, docker run), after one warm-up."""
    create_desktop_samples: int = 10
    burst_size: int = 64
    """burst: creates sent at once against a warm pool of as many terminals (and ``docker run`` at once)."""
    burst_rounds: int = 3
    burst_replicas: int = 2
    """burst: the same bursts against one control plane on Redis, then spread over this many sharing it; 0 skips."""
    admission_hold: int = 8
    """admission: the terminals the control plane's host is made to hold (``capacity.host_memory_mb``), all held."""
    admission_samples: int = 300
    """admission: creates refused one at a time through the SDK (and as many gets of a missing sandbox)."""
    admission_decisions: int = 20_000
    """admission: calls of each decision timed in this process (``Admission.refusal``, ``admit``)."""
    admission_flood_seconds: float = 10.0
    admission_flood_loops: int = 8
    """admission: concurrent loops sending creates to the full host during the flood."""
    admission_probe_rounds: int = 200
    """admission: a step and a ``GET /healthz`` each, timed before the flood (the baseline of those during it)."""
    step_samples: int = 500
    step_warmup: int = 20
    observe_samples: int = 100
    observe_warmup: int = 5
    reset_samples: int = 15
    reset_desktop_samples: int = 10
    pace_ms: float = 50.0
    """Step and observe are also timed with this pause between calls (an agent's think time; idle CPUs wake up
    slower than busy ones); 0 skips those rows."""
    throughput_sandboxes: int = 16
    throughput_seconds: float = 15.0
    spawn_loop_count: int = 2000
    """throughput: ``/bin/true`` spawned by the shell loop in each sandbox that measures the machine's spawn limit."""

    density_max_terminal: int = 1100
    """density: the ramp's maximum, past the target (``density.TARGET``: 1,000 terminals, 200 desktops)."""
    density_max_desktop: int = 220
    density_step_terminal: int = 50
    density_step_desktop: int = 10
    density_samples: int = 200
    """Steps timed at each point of the ramp, spread over the sandboxes held."""
    density_p99_ms: float = 100.0
    density_minutes: float = 15.0
    """Per kind: the ramp stops at this bound."""
    density_create_concurrency: int = 8
    density_health_interval_s: float = 0.0
    """The control plane's health-probe interval during the ramp; 0: its default (2 s)."""
    min_free_gib: float = 2.0
    """The ramp never leaves less MemAvailable than this."""

    games_pages: int = 16
    """Game sessions (pages) held and played at once in one browser sandbox."""

    tasks_samples: int = 15
    """Warm resets to a task (its snapshot swapped in), per kind."""
    tasks_setup_samples: int = 5
    """First resets to a task (its setup run and snapshotted), per kind."""
    tasks_demo_passes: int = 2
    """Timed passes of the demo over the sample tasks (after one untimed pass)."""

    k8s_pods: int = 5000
    """k8s-scale: pods the simulated cluster holds (``k8s_claims`` warm, the rest serving sandboxes)."""
    k8s_nodes: int = 50
    k8s_claims: int = 1000
    """The burst of creates served from the warm pool, all at once."""
    k8s_samples: int = 5
    """Passes timed of each kind (list, reconcile, health, operator)."""

    quiet_wait_s: float = 0.0
    """Before each section, wait up to this long for other workloads' containers to leave the engine."""
    idle_wait_s: float = 90.0
    """Before each section, wait up to this long for the machine to settle below ``idle_busy_pct`` (what the last
    section left behind: the engine removing hundreds of containers, their processes exiting)."""
    idle_busy_pct: float = 15.0
    """The machine counts as settled when less than this share of all its cores is busy over a second."""
    keep_logs: bool = False

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "output"}


QUICK: dict[str, Any] = {
    "create_samples": 4,
    "create_desktop_samples": 3,
    "burst_size": 16,
    "burst_rounds": 1,
    "admission_samples": 50,
    "admission_decisions": 2_000,
    "admission_flood_seconds": 3.0,
    "admission_probe_rounds": 50,
    "step_samples": 100,
    "step_warmup": 10,
    "observe_samples": 30,
    "observe_warmup": 3,
    "reset_samples": 4,
    "reset_desktop_samples": 3,
    "throughput_sandboxes": 4,
    "throughput_seconds": 4.0,
    "spawn_loop_count": 500,
    "density_max_terminal": 20,
    "density_max_desktop": 4,
    "density_step_terminal": 10,
    "density_step_desktop": 2,
    "density_samples": 50,
    "density_minutes": 2.0,
    "games_pages": 4,
    "tasks_samples": 4,
    "tasks_setup_samples": 2,
    "tasks_demo_passes": 1,
    "k8s_pods": 500,
    "k8s_nodes": 5,
    "k8s_claims": 100,
    "k8s_samples": 3,
    "idle_wait_s": 20.0,
}


def make_options(*, quick: bool, overrides: dict[str, Any]) -> Options:
    """The full or quick defaults, then every override that is not None."""
    base = replace(Options(), quick=quick, **(QUICK if quick else {}))
    known = {f.name for f in fields(Options)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown options: {sorted(unknown)}")
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
