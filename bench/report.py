"""Rows of the results table, rendered as plain text (stdout), markdown (the README) and JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.stats import Metric, Summary, Value

RATIO_NOTE = (
    "ratio = baseline p50 / ours p50 (how many times faster we are); for rates (steps/s) ours / baseline. "
    "Every baseline runs in the same run, on the same machine, through the docker CLI."
)
COLUMNS = (
    "section", "measurement", "n", "ours p50", "ours p99", "baseline", "base p50", "base p99", "ratio", "target", "met",
)  # fmt: skip


@dataclass(frozen=True)
class Target:
    text: str
    met: bool | None
    """None: not tested by this run (e.g. a quick run's ramp stops below the target)."""


@dataclass(frozen=True)
class Row:
    section: str
    name: str
    ours: Metric
    baseline: Metric | None = None
    baseline_name: str = ""
    ratio: float | None = None
    target: Target | None = None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "ours": self.ours.to_json(),
            "baseline": self.baseline.to_json() if self.baseline is not None else None,
            "baseline_name": self.baseline_name,
            "ratio": self.ratio,
            "target": {"text": self.target.text, "met": self.target.met} if self.target else None,
            "note": self.note,
        }


def format_latency(seconds: float) -> str:
    ms = seconds * 1000
    if ms < 0.1:  # an in-process call: microseconds
        us = seconds * 1e6
        return f"{us:.2f} µs" if us < 10 else f"{us:.1f} µs"
    if ms < 10:
        return f"{ms:.2f} ms"
    if ms < 100:
        return f"{ms:.1f} ms"
    if ms < 1000:
        return f"{ms:.0f} ms"
    return f"{seconds:.2f} s"


def format_number(value: float) -> str:
    if value == int(value) or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_ratio(ratio: float | None) -> str:
    if ratio is None:
        return ""
    if ratio < 1:  # slower than the baseline, or a share of it: two figures
        return f"{ratio:.2f}x"
    return f"{ratio:.0f}x" if ratio >= 100 else f"{ratio:.1f}x"


def _p50_p99(metric: Metric | None) -> tuple[str, str]:
    if metric is None:
        return "", ""
    if isinstance(metric, Summary):
        return format_latency(metric.p50), format_latency(metric.p99)
    assert isinstance(metric, Value)
    return f"{format_number(metric.value)} {metric.unit}", "-"


def _met(target: Target | None) -> str:
    if target is None:
        return ""
    return {True: "yes", False: "NO", None: "-"}[target.met]


def cells(row: Row, footnote: int | None = None) -> tuple[str, ...]:
    ours50, ours99 = _p50_p99(row.ours)
    base50, base99 = _p50_p99(row.baseline)
    name = row.name + (f" [{footnote}]" if footnote is not None else "")
    n = "" if row.ours.n is None else str(row.ours.n)
    target = row.target.text if row.target else ""
    return (
        row.section, name, n, ours50, ours99, row.baseline_name, base50, base99,
        format_ratio(row.ratio), target, _met(row.target),
    )  # fmt: skip


def _numbered(rows: Sequence[Row]) -> tuple[list[tuple[str, ...]], list[str]]:
    """Each row's cells, its note as a numbered footnote."""
    table: list[tuple[str, ...]] = []
    notes: list[str] = []
    for row in rows:
        if row.note:
            notes.append(f"[{len(notes) + 1}] {row.note}")
        table.append(cells(row, len(notes) if row.note else None))
    return table, notes


def render_text(rows: Sequence[Row]) -> str:
    """A fixed-width table; numbers right-aligned."""
    body, notes = _numbered(rows)
    table = [COLUMNS, *body]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    right = {"n", "ours p50", "ours p99", "base p50", "base p99", "ratio"}

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if c in right else v.ljust(w) for c, v, w in zip(COLUMNS, values, widths, strict=True)]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [line(COLUMNS), rule]
    previous = None
    for values in table[1:]:
        if previous is not None and values[0] != previous:
            out.append("")
        out.append(line(values))
        previous = values[0]
    return "\n".join([*out, "", *notes, RATIO_NOTE, ""])


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(rows: Sequence[Row], *, heading: str) -> str:
    body, notes = _numbered(rows)
    out = [heading, "", "| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    out += ["| " + " | ".join(_md_escape(v) for v in values) + " |" for values in body]
    return "\n".join([*out, "", *(f"{note}  " for note in notes), RATIO_NOTE, ""])
