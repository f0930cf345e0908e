"""The Grafana dashboard: the committed JSON is what infra/dashboard.py generates, every query parses and names
only series and labels the services (or the named exporters) export, and the chart ships it for the sidecar."""

from __future__ import annotations

import json

import pytest

from infra import dashboard
from tests.deploy.chart import objects, render
from tests.ops.promql import unknown


def test_committed_json_is_current():
    committed = dashboard.OUT.read_text(encoding="utf-8")
    assert committed == dashboard.render(), "run: .venv/bin/python infra/dashboard.py"


@pytest.mark.parametrize(("title", "expr"), dashboard.queries(), ids=[t for t, _ in dashboard.queries()])
def test_query_parses_and_names_exported_series(title, expr):
    assert unknown(dashboard.as_sent(expr)) == [], title


def test_every_panel_has_a_query_and_a_unique_id():
    board = json.loads(dashboard.OUT.read_text(encoding="utf-8"))
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert panels and all(p["targets"] for p in panels)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_chart_ships_it_for_grafanas_sidecar():
    assert objects(render({}), "ConfigMap") == [
        d for d in objects(render({}), "ConfigMap") if not d["metadata"]["name"].endswith("-dashboard")
    ]
    docs = render({"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "AI"}}})
    (cm,) = [d for d in objects(docs, "ConfigMap") if d["metadata"]["name"] == "rel-conductor-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "AI"}
    assert json.loads(cm["data"]["conductor.json"]) == json.loads(dashboard.OUT.read_text(encoding="utf-8"))
