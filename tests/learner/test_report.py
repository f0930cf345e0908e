"""The training report's stage table (services/learner/report.py ``stage_table``): a recipe run as a chain of runs
reads as one table, each measured stage a row, from the runs' own ``stages.json``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from services.learner.report import STAGE_COLUMNS, stage_table

HELD_OUT = {
    "correct_rate": 0.9375,
    "usd_per_rollout": 0.00041,
    "steps_per_workflow": 2.03,
    "specialist_share": {"mcq": {"any_step": 1.0, "first_step": 1.0}, "math": {"any_step": 0.75}},
    "topologies": {"[] all": 60, "[]": 3, "[] all all": 1, "all": 0},
}


def _run(root: Path, name: str, stages: dict) -> Path:
    run = root / name
    run.mkdir()
    (run / "stages.json").write_text(json.dumps(stages))
    return run


def test_each_measured_stage_of_each_run_is_a_row_in_order(tmp_path: Path) -> None:
    first = _run(
        tmp_path, "views", {"base": {"parse_rate": 1.0}, "search": {"parse_rate": 0.97, "rows": 512}}
    )
    second = _run(
        tmp_path,
        "grpo",
        {"before_grpo": {"parse_rate": 1.0, "held_out": HELD_OUT}, "grpo": {"policy": "runs/grpo/policy"}},
    )
    lines = stage_table([first, second]).splitlines()
    assert lines[0] == STAGE_COLUMNS and set(lines[1]) == {"|", "-"}
    assert lines[2] == "| views | base | 1.00 | — | — | — | — | — |"
    assert lines[3].startswith("| views | search | 0.97 | — |")
    assert lines[4] == (
        "| grpo | before_grpo | 1.00 | 93.8% | 0.00041 | 2.03 | math 75.0%, mcq 100.0% "
        "| `[] all` 60, `[]` 3, `[] all all` 1 |"
    )
    assert len(lines) == 5  # the GRPO stage's bookkeeping entry (its policy path) is not a row


def test_a_directory_without_stages_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nothing: no stages\.json"):
        stage_table([tmp_path / "nothing"])


def test_the_module_prints_the_table(tmp_path: Path) -> None:
    run = _run(tmp_path, "r", {"base": {"parse_rate": 0.5}})
    out = subprocess.run(
        [sys.executable, "-m", "services.learner.report", "--table", str(run)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    ).stdout
    assert "| r | base | 0.50 |" in out
