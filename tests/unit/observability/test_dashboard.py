"""The Grafana dashboard under deploy/ is a dashboard Grafana imports, and asks only for metrics the code exports:
every query parses as PromQL and names only series of ``Metrics``, and every metric has a panel."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest

from sandbox.observability.metrics import Metrics

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "sandbox-dashboard.json"
# Grafana's variables, as Grafana would expand them before the query reaches Prometheus.
VARIABLES = {"$__rate_interval": "1m", "$kind": ".*"}
# The series each metric type puts out (classic text format; ``_created`` is the client's, not ours to query).
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _selected(expr: str) -> set[str]:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    names: set[str] = set()

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def exported() -> dict[str, str]:
    """Every series name the control plane exports -> the metric it belongs to."""
    series: dict[str, str] = {}
    for family in Metrics().registry.collect():
        for suffix in SUFFIXES[family.type]:
            series[family.name + suffix] = family.name
    return series


def test_every_query_parses_and_names_only_exported_series(dashboard: dict[str, Any]) -> None:
    series = exported()
    queries = [(p["title"], t["expr"]) for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    assert queries
    for title, expr in queries:
        names = _selected(expr)
        assert names, f"panel {title!r} selects no metric: {expr}"
        unknown = names - set(series)
        assert not unknown, f"panel {title!r} asks for {sorted(unknown)}, which the code does not export"


def test_every_metric_has_a_panel(dashboard: dict[str, Any]) -> None:
    series = exported()
    shown = {
        series[name]
        for p in _panels(dashboard["panels"])
        for t in p.get("targets", [])
        for name in _selected(t["expr"])
        if name in series
    }
    assert shown == set(series.values()), f"metrics with no panel: {sorted(set(series.values()) - shown)}"


def test_it_is_an_importable_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    assert dashboard["id"] is None, "an exported dashboard carries no database id"
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs["DS_PROMETHEUS"]["type"] == "datasource" and inputs["DS_PROMETHEUS"]["pluginId"] == "prometheus"
    datasource = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    panels = list(_panels(dashboard["panels"]))
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"} and panel["datasource"] == datasource, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]
        assert all(t["datasource"] == datasource for t in panel["targets"]), panel["title"]
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == datasource
        assert _selected(variable["query"]["query"].removeprefix("label_values(").split(",")[0]) <= set(exported())
