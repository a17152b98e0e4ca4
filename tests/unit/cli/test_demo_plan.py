"""Which sample tasks the demo runs: every kind but android unless asked (an android sandbox needs KVM and an image
built from an Android SDK, which a fresh machine has not)."""

from __future__ import annotations

from pathlib import Path

from sandbox.cli.demo import OPT_IN_KINDS, load_scripted

TASKS = Path(__file__).resolve().parents[3] / "tasks"


def _kinds(plan: list) -> set[str]:
    return {s.task.sandbox.kind.value for s in plan}


def test_the_default_plan_leaves_android_out_and_names_it_runs_when_asked() -> None:
    default = _kinds(load_scripted(TASKS))
    assert default == {"terminal", "desktop", "browser"}
    assert not default & OPT_IN_KINDS
    assert _kinds(load_scripted(TASKS, {"android"})) == {"android"}
    assert _kinds(load_scripted(TASKS, {"terminal", "android"})) == {"terminal", "android"}
