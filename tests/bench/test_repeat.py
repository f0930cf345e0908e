"""bench/repeat.py: the median of each figure over runs, and a bench that fails or prints no JSON refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import repeat


def test_the_median_of_every_number_and_the_first_run_for_the_rest() -> None:
    runs = [{"bench": "x", "a": 1.0, "b": 5, "ok": True}, {"bench": "x", "a": 3.0, "b": 1, "ok": False}]
    runs.append({"bench": "x", "a": 2.0, "b": 9, "ok": True})
    assert repeat.medians(runs) == {"bench": "x", "a": 2.0, "b": 5, "ok": True}


def test_a_figure_missing_from_one_run_is_not_given_a_median() -> None:
    assert repeat.medians([{"a": 1.0}, {"a": "n/a"}]) == {"a": 1.0}


def test_a_bench_whose_last_line_is_not_json_is_refused(tmp_path: Path) -> None:
    bench = tmp_path / "b.py"
    bench.write_text("print('{\"a\": 1}')\nprint('done')\n")
    with pytest.raises(SystemExit, match="last line is not its JSON object"):
        repeat.one_run(str(bench), [])
    bench.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(SystemExit, match="exited with 3"):
        repeat.one_run(str(bench), [])
    bench.write_text("print('{\"a\": 1.5}')\n")
    assert repeat.one_run(str(bench), []) == {"a": 1.5}
