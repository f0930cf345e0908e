"""The method's facts live in the repository: every citation points into docs/method.md, at a section it has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"docs/method\.md §(\d+)")


def _sources() -> list[Path]:
    dirs = (
        "conductor",
        "schemas",
        "tasks",
        "services",
        "evaluation",
        "tests",
        "bench",
        "docs",
        "scripts",
        "charts",
        "infra",
    )
    found = [p for d in dirs for p in (ROOT / d).rglob("*") if p.suffix in {".py", ".md", ".yaml", ".toml"}]
    return [p for p in found if p.is_file()] + [ROOT / "README.md"]


def test_no_citation_of_a_file_outside_the_repository() -> None:
    stale = "PAPER" + ".md"  # spelled apart so this file does not cite it
    assert [str(p.relative_to(ROOT)) for p in _sources() if stale in p.read_text(errors="replace")] == []


def test_every_citation_names_a_section_of_the_method_notes() -> None:
    sections = set(re.findall(r"^## §(\d+) ", (ROOT / "docs" / "method.md").read_text(), flags=re.M))
    cited = {
        (str(p.relative_to(ROOT)), n)
        for p in _sources()
        for n in CITATION.findall(p.read_text(errors="replace"))
    }
    assert len(cited) > 20  # the code does cite it
    assert sorted((f, n) for f, n in cited if n not in sections) == []
