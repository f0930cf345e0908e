"""report.html: every section, charts that hold drawn marks, no external loads, model text escaped."""

from __future__ import annotations

import re
from pathlib import Path

from evaluation import table
from evaluation.report import write_report
from evaluation.report.graph import workflow_svg
from schemas.errors import ErrorCode
from tests.evaluation.items import grid, item

SECTIONS = ("accuracy", "cost", "workers", "steps", "workflows", "failures")
HOSTILE = '<script>alert("x")</script><img src="https://evil.example/x.png">'


def _report(tmp_path: Path) -> str:
    items = grid("moa", "x", [[1, 0, 1], [1, 1, 0]], workers=("w0", "w1", "w2"), cost=0.03)
    items += grid("single:w1", "x", [[0, 0, 1], [0, 1, 1]], workers=("w1",), cost=0.001)
    items += [
        item("moa", "y", 0, 9, False, response=HOSTILE),
        item("moa", "y", 1, 9, False, error=ErrorCode.TIMEOUT),
    ]
    results = table.summarize(
        items,
        ["x", "y"],
        ["moa", "single:w1"],
        {"pool": "sim", "workers": "w0,w1,w2"},
        versions={"x": "1", "y": "3"},
    )
    return write_report(tmp_path, results, items).read_text()


def test_every_section_and_its_content(tmp_path: Path) -> None:
    html = _report(tmp_path)
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in html
    assert "50.00 ± 0.00" in html or "66.67" in html  # the table's figures
    assert html.count("<svg") >= 3 + 14  # three charts, one graph per workflow
    assert "timeout" in html and "wrong answer N" in html  # failures grouped with specifics blanked
    assert "task versions: x v1 · y v3" in html


def test_charts_hold_drawn_marks(tmp_path: Path) -> None:
    html = _report(tmp_path)
    for sid in ("cost", "workers", "steps"):
        section = html.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]
        assert section.count("<path") > 5 or section.count("<use") > 2, sid


def test_no_external_loads(tmp_path: Path) -> None:
    html = _report(tmp_path)
    without_namespaces = re.sub(r'\sxmlns(:\w+)?="[^"]*"', "", html)
    assert "http://" not in without_namespaces.replace("https://evil.example", "")
    assert not re.search(r"<script|<link|@import|src=\"http|url\(http", html, re.IGNORECASE)


def test_model_text_is_escaped(tmp_path: Path) -> None:
    html = _report(tmp_path)
    assert HOSTILE not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "plan &lt;b&gt;" in html


def test_workflow_graph_draws_access_as_edges() -> None:
    [rnd] = item("moa", "x", 0, 0, True, workers=("w0", "w1", "w2")).result.workflows
    svg = workflow_svg([rnd], "t")
    assert svg.count("<rect") == 3 and svg.count('marker-end="url(#arrow-t)"') == 3  # 1->0; 2->0, 2->1
    assert 'id="arrow-t"' in svg
