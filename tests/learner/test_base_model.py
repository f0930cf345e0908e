"""The SmolLM2 conversion is an importable module of the learner, runnable where only the standard library is.

Before, ``policy.prepare_base`` loaded scripts/vllm/convert.py by file path: scripts/ is neither installed nor copied
into the learner image, so ``source = "smollm2"`` could not work in a deployment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from services.learner import policy, smollm2
from services.learner.config import parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_vllm_venv_can_run_it_from_the_repository_root() -> None:
    """-S: no site-packages, as in the vllm venv where neither this project nor its dependencies are installed."""
    argv = [sys.executable, "-S", "-m", "services.learner.smollm2", "--help"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "OUT" in done.stdout.upper()


def test_the_learner_takes_a_converted_directory_as_it_is(tmp_path: Path) -> None:
    out = tmp_path / "smollm2"
    out.mkdir()
    (out / smollm2.STAMP).write_text(f"{smollm2.GGUF}\n")
    config = parse_config(f"[model]\nsource = 'smollm2'\npath = '{out}'\n")
    assert policy.prepare_base(config, []) == out
