"""The paper-style table: mean ± standard error over repeats, the average, costs and steps, results.json/csv."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from evaluation import table
from evaluation.report.charts import pareto_front
from schemas.errors import ErrorCode
from tests.evaluation.items import grid, item


def _items() -> list:
    # strategy a: bench x repeats 3/4, 1/4, 2/4 correct; bench y: 4/4, 2/4, 3/4
    a = grid(
        "a", "x", [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0]], workers=("w0", "w1"), cost=0.02, tokens=300
    )
    a += grid(
        "a", "y", [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], workers=("w0", "w1"), cost=0.04, tokens=500
    )
    b = grid("b", "x", [[1, 0, 0, 0]] * 3, workers=("w1",), cost=0.001, tokens=100)
    b += grid("b", "y", [[0, 0, 0, 0]] * 2 + [[0, 0, 0, 1]], workers=("w1",), cost=0.003, tokens=100)
    return a + b


def test_mean_and_standard_error_over_repeats() -> None:
    results = table.summarize(_items(), ["x", "y"], ["a", "b"])
    x = results.row("a", "x")
    assert x is not None and x.accuracy.per_repeat == [0.75, 0.25, 0.5]
    assert x.accuracy.mean == pytest.approx(0.5)
    assert x.accuracy.se == pytest.approx(0.25 / math.sqrt(3))  # sample sd 0.25 over 3 repeats
    avg = results.row("a", table.AVERAGE)
    assert avg is not None and avg.accuracy.per_repeat == pytest.approx([0.875, 0.375, 0.625])
    assert avg.accuracy.se == pytest.approx(0.25 / math.sqrt(3))
    assert avg.cost_per_question == pytest.approx(0.03) and avg.tokens_per_question == pytest.approx(400)
    assert avg.steps_per_workflow == pytest.approx(2.0) and avg.calls_per_question == pytest.approx(2.0)
    b = results.row("b", "y")
    assert b is not None and b.accuracy.mean == pytest.approx(1 / 12)
    assert table.pct(x.accuracy) == "50.00 ± 14.43"


def test_one_repeat_has_no_standard_error() -> None:
    results = table.summarize(grid("a", "x", [[1, 0]]), ["x"], ["a"])
    row = results.row("a", "x")
    assert row is not None and row.accuracy.se is None and table.pct(row.accuracy) == "50.00"


def test_failures_count_as_not_correct_and_are_counted() -> None:
    items = [item("a", "x", 0, 0, True), item("a", "x", 0, 1, False, error=ErrorCode.WORKER_ERROR)]
    row = table.summarize(items, ["x"], ["a"]).row("a", "x")
    assert row is not None and row.accuracy.mean == 0.5 and row.failures == 1


def test_worker_counts_and_steps_histogram() -> None:
    results = table.summarize(_items(), ["x", "y"], ["a", "b"])
    assert results.worker_steps["x"]["a"] == {"w0": 12, "w1": 12}
    assert results.worker_steps["y"]["b"] == {"w1": 12}
    assert results.steps_histogram == {"a": {2: 24}, "b": {1: 24}}


def test_results_json_and_csv(tmp_path: Path) -> None:
    results = table.summarize(_items(), ["x", "y"], ["a", "b"], {"pool": "p.toml"})
    table.write(results, tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["benchmarks"] == ["x", "y"] and data["repeats"] == 3 and data["meta"] == {"pool": "p.toml"}
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [(r["strategy"], r["benchmark"]) for r in rows] == [
        ("a", "x"),
        ("a", "y"),
        ("a", "average"),
        ("b", "x"),
        ("b", "y"),
        ("b", "average"),
    ]
    assert float(rows[0]["accuracy_mean"]) == pytest.approx(0.5) and rows[0]["repeats"] == "3"
    assert float(rows[2]["cost_per_question"]) == pytest.approx(0.03)


def test_each_benchmarks_task_version_is_recorded(tmp_path: Path) -> None:
    results = table.summarize(_items(), ["x", "y"], ["a", "b"], versions={"x": "1", "y": "2"})
    assert results.versions == {"x": "1", "y": "2"}
    assert [(r.benchmark, r.version) for r in results.rows][:3] == [("x", "1"), ("y", "2"), ("average", "")]
    table.write(results, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["versions"] == {"x": "1", "y": "2"}
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [(r["benchmark"], r["version"]) for r in rows][:3] == [("x", "1"), ("y", "2"), ("average", "")]
    out = io.StringIO()
    Console(file=out, width=200).print(table.rich_table(results))
    assert "task versions: x v1 · y v2" in out.getvalue()


def test_terminal_table_has_every_benchmark_and_the_average() -> None:
    out = io.StringIO()
    Console(file=out, width=200).print(table.rich_table(table.summarize(_items(), ["x", "y"], ["a", "b"])))
    text = out.getvalue()
    assert "Average" in text and "50.00 ± 14.43" in text and "$/q" in text


def test_pareto_front() -> None:
    points = [("cheap", 0.001, 40.0), ("mid", 0.01, 70.0), ("dominated", 0.02, 60.0), ("best", 0.05, 80.0)]
    assert pareto_front(points) == ["cheap", "mid", "best"]


def _two_rounds(n: int, second: tuple[str, ...]) -> object:
    """An item whose first round asked w0 and w1 and whose second round called ``second`` (none: handed back)."""
    import msgspec

    from schemas.solve import RoundRecord, StepRecord

    it = item("c", "x", 0, n, True, workers=("w0", "w1"))
    steps = [StepRecord(index=i, model_id=0, worker=w, subtask="s", access=[]) for i, w in enumerate(second)]
    later = RoundRecord(round=1, policy="local:p", reasoning="", steps=steps, handback=not second)
    result = msgspec.structs.replace(it.result, workflows=[*it.result.workflows, later])
    return msgspec.structs.replace(it, result=result)


def test_the_share_escalated_and_the_workflow_shapes_round_by_round(tmp_path: Path) -> None:
    items = [_two_rounds(0, ("strong",)), _two_rounds(1, ()), _two_rounds(2, ()), _two_rounds(3, ())]
    items += grid("d", "x", [[1, 0]], workers=("w0",))
    results = table.summarize(items, ["x"], ["c", "d"])
    c, d = results.row("c", "x"), results.row("d", table.AVERAGE)
    assert c is not None and c.escalated == 0.25 and d is not None and d.escalated == 0.0
    assert results.shapes["x"]["c"] == {"w0 + w1 → hand back": 3, "w0 + w1 → strong": 1}
    assert results.shapes["x"]["d"] == {"w0": 2}
    out = io.StringIO()
    Console(file=out, width=200).print(table.rich_table(results))
    assert "escalated" in out.getvalue() and "25%" in out.getvalue()
    table.write(results, tmp_path)
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert rows[0]["escalated"] == "0.2500"
