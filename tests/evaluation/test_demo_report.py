"""`conductor demo` ends by writing the eval report for its run and printing where it is."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from conductor.app import demo

pytestmark = pytest.mark.e2e


async def test_the_demo_writes_its_report(nats_url, subject_prefix, tmp_path: Path, monkeypatch) -> None:
    # Not capsys: the services configure logging onto the stream they find, which capsys closes after the test.
    out = io.StringIO()
    monkeypatch.setattr(demo, "Console", lambda **_kw: Console(file=out, width=300))
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CONDUCTOR_SUBJECT_PREFIX", subject_prefix)
    assert await demo.run_demo(report_dir=tmp_path) == 0
    html = (tmp_path / "report.html").read_text()
    assert "Conductor demo" in html and '<section id="workflows">' in html and "demo · conductor" in html
    printed = out.getvalue()
    assert f"report: {tmp_path / 'report.html'}" in printed
    # Every question's workflow, what each step saw in brackets, as written (not eaten as console markup).
    assert (
        "Conductor: baseline:moa (CONDUCTOR_POLICY)" in printed
    )  # the tests pin the baseline (tests/conftest.py)
    lines = [ln for ln in printed.splitlines() if ln.startswith("  math-1: ")]
    assert len(lines) == 1 and " → " in lines[0] and "[all]" in lines[0], lines
