"""The code's style is enforced, not suggested (issue 21): `ruff check` and `ruff format --check` pass on the whole
repository, as `make lint` runs them, so a red formatter fails CI like a failing test. No comment that switches
the formatter off for a statement or a block: the formatter's output is the style."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed (it is in the dev extra)")
    return found


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"])
def test_ruff_passes_on_the_whole_repository(args: list[str]) -> None:
    run = subprocess.run([_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, f"ruff {' '.join(args)}:\n{run.stdout[-3000:]}{run.stderr[-1000:]}"


def test_no_formatter_escapes() -> None:
    marked = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in ROOT.rglob("*.py")
        if not {".venv", "node_modules", "runs"} & set(path.parts)
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if "fmt: " + "skip" in line or "fmt: " + "off" in line
    ]
    assert not marked, f"formatter escapes: {marked[:20]}"
