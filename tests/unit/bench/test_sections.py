"""The benchmark suite's pure parts: statistics, options and the table (no engine, no server)."""

from __future__ import annotations

import asyncio
import os
import time
from types import SimpleNamespace

import pytest

from bench import cli
from bench.cli import Outcome, _stem, parse
from bench.machine import CpuMeter, container_cpu_seconds, mem_available, pids_named, rss
from bench.options import QUICK, SECTION_NAMES, Options, make_options
from bench.report import Row, Target, format_latency, format_ratio, render_markdown, render_text
from bench.sections import SECTIONS
from bench.sections.density import TARGET, _sandboxes_cpu, _target
from bench.stats import Summary, Value, gain, percentile, speedup
from bench.step_cpu import CpuSplit


def test_percentile_interpolates_between_closest_ranks() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile(list(range(1, 101)), 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2, 3], 0) == 1 and percentile([1, 2, 3], 100) == 3


@pytest.mark.parametrize(("samples", "q"), [([], 50), ([1.0], 101), ([1.0], -1)])
def test_percentile_refuses_nonsense(samples: list[float], q: float) -> None:
    with pytest.raises(ValueError):
        percentile(samples, q)


def test_summary_and_ratios() -> None:
    s = Summary.of([0.004, 0.001, 0.002, 0.003])
    assert (s.n, s.p50, s.min, s.max) == (4, 0.0025, 0.001, 0.004)
    assert s.mean == pytest.approx(0.0025)
    assert speedup(0.060, 0.002) == pytest.approx(30) and speedup(1.0, 0.0) is None
    assert gain(600, 30) == 20 and gain(1, 0) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.00000234, "2.34 µs"),
        (0.0000166, "16.6 µs"),
        (0.00012, "0.12 ms"),
        (0.00234, "2.34 ms"),
        (0.0234, "23.4 ms"),
        (0.234, "234 ms"),
        (2.345, "2.35 s"),
    ],
)
def test_latency_format(seconds: float, text: str) -> None:
    assert format_latency(seconds) == text


def test_ratio_format() -> None:
    assert (format_ratio(None), format_ratio(9.87), format_ratio(123.4)) == ("", "9.9x", "123x")
    assert (format_ratio(0.9376), format_ratio(0.03)) == ("0.94x", "0.03x")


def _rows() -> list[Row]:
    base = Summary.of([0.060, 0.070])
    ours = Summary.of([0.002, 0.003])
    return [
        Row("step", "exec true", ours, base, "docker exec", 26.0, Target("≥ 10x", True)),
        Row("step", "a | pipe", ours, base, "docker exec", 26.0, Target("≥ 100x", False), note="why"),
        Row("density", "terminals", Value(400, "sandboxes"), target=Target("≥ 400 (ramp max 20)", None)),
    ]


def test_text_table_aligns_columns_separates_sections_and_footnotes_notes() -> None:
    text = render_text(_rows())
    lines = text.splitlines()
    header, rule = lines[0], lines[1]
    assert header.split()[:3] == ["section", "measurement", "n"]
    assert all(len(part) > 0 for part in rule.split("  "))
    step, noted, blank, density = lines[2:6]
    assert blank == ""
    assert step.index("2.50 ms") == noted.index("2.50 ms"), "numbers line up"
    assert step.rstrip().endswith("yes") and noted.rstrip().endswith("NO") and density.rstrip().endswith("-")
    assert "a | pipe [1]" in noted and "[1] why" in text
    assert "400 sandboxes" in density and "ratio = baseline p50 / ours p50" in text


def test_markdown_table_escapes_pipes_and_has_one_line_per_row() -> None:
    md = render_markdown(_rows(), heading="Heading")
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 2 + 3
    assert all(line.count("|") - line.count("\\|") == 12 for line in table)
    assert "a \\| pipe [1]" in md and md.startswith("Heading\n")


def test_every_section_is_registered_in_order() -> None:
    assert tuple(SECTIONS) == SECTION_NAMES


def test_options_quick_and_overrides() -> None:
    quick = make_options(quick=True, overrides={"step_samples": 7, "observe_samples": None})
    assert quick.step_samples == 7 and quick.observe_samples == QUICK["observe_samples"]
    assert make_options(quick=False, overrides={}) == Options()
    with pytest.raises(ValueError, match="unknown"):
        make_options(quick=False, overrides={"nope": 1})


def test_command_line() -> None:
    options = parse(["--quick", "--only", "step", "create", "--density-max-terminal", "50", "--density-p99-ms", "80"])
    assert options.quick and options.sections == ("create", "step")
    assert options.density_max_terminal == 50 and options.density_p99_ms == 80.0
    assert parse([]).sections == SECTION_NAMES
    assert parse(["--burst-replicas", "0", "--pace-ms", "0"]).burst_replicas == 0


@pytest.mark.parametrize("flag", ["--burst-replicas", "--burst-size", "--pace-ms"])
def test_a_negative_count_or_duration_is_refused(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse([flag, "-1"])
    assert f"argument {flag}: -1 is negative" in capsys.readouterr().err


def test_density_target_is_untested_when_the_ramp_stops_below_it() -> None:
    assert _target("terminal", 20, maximum=20).met is None
    assert _target("terminal", 650, maximum=650).met is None  # the ramp stopped at its maximum, below 1,000
    assert _target("terminal", 1000, maximum=1100).met is True
    assert _target("terminal", 950, maximum=1100).met is False
    assert _target("terminal", 950, maximum=1100).text == "≥ 1000"
    assert _target("desktop", 200, maximum=220).met is True
    assert _target("desktop", 130, maximum=220).met is False


def test_a_full_density_ramp_can_reach_the_targets_and_a_quick_one_stays_small() -> None:
    full, quick = make_options(quick=False, overrides={}), make_options(quick=True, overrides={})
    assert TARGET == {"terminal": 1000, "desktop": 200}
    assert full.density_max_terminal > TARGET["terminal"] and full.density_max_desktop > TARGET["desktop"]
    assert full.density_max_terminal // full.density_step_terminal <= 25  # batches a bounded run gets through
    assert full.density_max_desktop // full.density_step_desktop <= 25
    assert quick.density_max_terminal <= 20 and quick.density_max_desktop <= 4


def test_the_sandboxes_cpu_is_unknown_when_a_cgroup_cannot_be_read() -> None:
    assert _sandboxes_cpu([]) == 0
    assert _sandboxes_cpu(["0" * 64]) is None  # no such container


def test_host_figures_of_this_process() -> None:
    meter = CpuMeter({"me": os.getpid(), "gone": 2**22 + 7})
    meter.start()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    shares = meter.read()
    assert shares["me_cpu_pct"] > 10 and 0 <= shares["machine_busy_pct"] <= 100
    assert "gone_cpu_pct" not in shares, "a process that does not exist is left out, not an error"
    assert rss(os.getpid()) > 1024 * 1024 and mem_available() > 0
    with open(f"/proc/{os.getpid()}/comm") as f:
        assert os.getpid() in pids_named(f.read().strip())


def test_only_a_complete_full_run_replaces_the_latest_table() -> None:
    full, quick = Options(), make_options(quick=True, overrides={})
    assert _stem(full, Outcome(started_at="t")) == "latest"
    assert _stem(quick, Outcome(started_at="t")) == "quick"
    assert _stem(full, Outcome(started_at="t", failures={"step": "broke"})) == "partial"
    assert _stem(full, Outcome(started_at="t", interrupted=True)) == "partial"
    assert _stem(make_options(quick=False, overrides={"sections": ("step",)}), Outcome(started_at="t")) == "partial"


def test_a_steps_cpu_split_per_step_and_an_unknown_container() -> None:
    split = CpuSplit(client=0.5, control_plane=1.0, sandboxes=2.0, other=0.5)
    assert split.total == 4.0
    assert split.per_step_ms(1000) == {"client": 0.5, "control plane": 1.0, "sandboxes": 2.0, "other": 0.5}
    assert split.describe(1000) == "client 0.50 ms, control plane 1.00 ms, sandboxes 2.00 ms, other 0.50 ms"
    assert container_cpu_seconds("0" * 64) is None  # no such cgroup: the rows are left out, never made up


class _Said:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)


@pytest.mark.parametrize(
    ("readings", "wait_s", "settled", "said"),
    [
        ([40.0, 30.0, 9.0, 50.0], 60.0, 9.0, ["waiting for the machine to settle: 40% busy"]),
        ([3.0], 60.0, 3.0, []),
        (
            [40.0, 35.0, 5.0],
            2.0,
            35.0,
            ["waiting for the machine to settle: 40% busy", "the machine did not settle within 2 s (35% busy)"],
        ),
    ],
)
def test_a_section_waits_for_the_machine_to_settle(
    monkeypatch: pytest.MonkeyPatch, readings: list[float], wait_s: float, settled: float, said: list[str]
) -> None:
    left = iter(readings)
    clock = [0.0]

    async def busy_pct(window_s: float) -> float:
        clock[0] += window_s  # each reading takes its window
        return next(left)

    monkeypatch.setattr(cli, "_busy_pct", busy_pct)
    monkeypatch.setattr(cli, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    progress = _Said()
    bench = SimpleNamespace(options=make_options(quick=False, overrides={"idle_wait_s": wait_s}), progress=progress)
    got = asyncio.run(cli._wait_idle(bench))  # type: ignore[arg-type]
    assert got["busy_pct"] == settled
    assert progress.lines == said


def test_the_machine_busy_share_is_read_over_a_window() -> None:
    assert 0.0 <= asyncio.run(cli._busy_pct(0.2)) <= 100.0
