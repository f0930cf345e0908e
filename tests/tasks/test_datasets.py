"""Loaders for the published record formats, including load-time checks and the safe private-test decoder."""

from __future__ import annotations

import base64
import csv
import json
import pickle
import zlib
from pathlib import Path

import pytest

from schemas.verify import FunctionalTestsReference, StdioTestsReference, TextReference, UnittestReference
from tasks import datasets
from tasks.errors import DatasetError
from tasks.problem import Problem
from tests.verifier.conftest import FIXTURES


def test_math500_and_its_answer_check() -> None:
    problems = datasets.load_math500(FIXTURES / "math500.jsonl")
    assert len(problems) == 14 and problems[0].id == "test/prealgebra/901.json"
    assert problems[0].reference == TextReference(answer="\\frac{3}{4}", kind="math")
    with pytest.raises(DatasetError, match="last boxed"):
        datasets.load_math500(FIXTURES / "math500_bad.jsonl")


def test_paper_split_is_seeded() -> None:
    problems = [
        Problem(id=str(i), benchmark="m", question="", reference=TextReference(answer="1"), domain="math")
        for i in range(500)
    ]
    train, test = datasets.paper_split(problems, seed=3)
    assert (len(train), len(test)) == (300, 100)
    assert not {p.id for p in train} & {p.id for p in test}
    assert datasets.paper_split(problems, seed=3) == (train, test)


def test_aime_variants_and_integer_check(tmp_path: Path) -> None:
    assert [p.reference.answer for p in datasets.load_aime(FIXTURES / "aime25.jsonl")] == [
        "24",
        "24",
        "9",
        "401",
    ]
    assert datasets.load_aime(FIXTURES / "aime25_problem_idx.jsonl")[0].id == "aime25/7"
    bad = tmp_path / "aime.jsonl"
    bad.write_text(json.dumps({"id": 1, "problem": "p", "answer": "12.5"}) + "\n")
    with pytest.raises(DatasetError, match="integer"):
        datasets.load_aime(bad)


def test_gpqa_shuffle_keeps_the_gold_letter_and_is_seeded() -> None:
    first = datasets.load_gpqa(FIXTURES / "gpqa_diamond.csv", seed=0)
    again = datasets.load_gpqa(FIXTURES / "gpqa_diamond.csv", seed=0)
    other = datasets.load_gpqa(FIXTURES / "gpqa_diamond.csv", seed=1)
    assert first == again
    assert [p.reference.choices for p in first] != [p.reference.choices for p in other]
    correct = ["Photon", "sp3", "Mitochondrion", "Newton's first law"]
    for problem, answer in zip(first, correct, strict=True):
        ref = problem.reference
        assert isinstance(ref, TextReference) and ref.kind == "mcq" and len(ref.choices or []) == 4
        assert ref.choices["ABCD".index(ref.answer)] == answer
        assert f"{ref.answer}) {answer}" in problem.question
    assert "  " not in first[0].question  # spaces collapsed


def test_gpqa_bad_rows_are_typed_errors(tmp_path: Path) -> None:
    """A row the gold letter cannot be trusted for stops the load: no answer, a lost column, two equal options."""
    base = {"Record ID": "recBad0000000001", "Question": "Which is largest?", "Correct Answer": "3"}
    base |= {"Incorrect Answer 1": "2", "Incorrect Answer 2": "1", "Incorrect Answer 3": "0"}
    cases = {
        "empty answer": ({**base, "Incorrect Answer 2": " \n"}, "empty answer"),
        "missing column": (
            {k: v for k, v in base.items() if k != "Incorrect Answer 3"},
            "Incorrect Answer 3",
        ),
        "duplicate options": ({**base, "Incorrect Answer 1": "3\n"}, "not distinct"),
        "empty question": ({**base, "Question": "\n"}, "empty question"),
    }
    for name, (row, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.csv"
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(row), lineterminator="\n")
            writer.writeheader()
            writer.writerow(row)
        with pytest.raises(DatasetError, match=message):
            datasets.load_gpqa(path)


def test_mmlu_both_formats() -> None:
    rows = datasets.load_mmlu(FIXTURES / "mmlu.jsonl")
    assert [p.reference.answer for p in rows] == ["C", "A", "B", "D"]
    assert rows[0].id == "mmlu/geography/0" and "C) Paris" in rows[0].question
    csv_rows = datasets.load_mmlu(FIXTURES / "mmlu.csv")
    assert [p.reference.answer for p in csv_rows] == ["B", "C"]


def test_livecodebench_tests_errata_and_types() -> None:
    problems = {p.id: p for p in datasets.load_livecodebench(FIXTURES / "livecodebench.jsonl")}
    assert "livecodebench/abc311_c" not in problems  # published erratum
    stdin = problems["livecodebench/abc900_a"].reference
    assert isinstance(stdin, StdioTestsReference) and len(stdin.tests) == 4  # 1 public + 3 private (pickled)
    functional = problems["livecodebench/9001"].reference
    assert isinstance(functional, FunctionalTestsReference) and functional.func_name == "twoSum"
    assert len(functional.tests) == 3
    assert len(datasets.load_livecodebench(FIXTURES / "livecodebench.jsonl", include_errata=True)) == 6
    public = {
        p.id: p for p in datasets.load_livecodebench(FIXTURES / "livecodebench.jsonl", public_only=True)
    }
    assert len(public["livecodebench/abc900_a"].reference.tests) == 1  # type: ignore[union-attr]


class Exploit:
    def __reduce__(self) -> tuple:
        return (Path.touch, (Path("/tmp/verifier-pickle-exploit-ran"),))


def _blob(obj: object) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj))).decode()


def test_private_tests_unpickler_refuses_objects_and_non_strings() -> None:
    marker = Path("/tmp/verifier-pickle-exploit-ran")
    marker.unlink(missing_ok=True)
    with pytest.raises(DatasetError, match="refused"):
        datasets.decode_private_tests(_blob(Exploit()))
    assert not marker.exists()
    with pytest.raises(DatasetError, match="expected str"):
        datasets.decode_private_tests(_blob([{"input": "1", "output": "1"}]))
    assert datasets.decode_private_tests(_blob(json.dumps([{"input": "1"}]))) == [{"input": "1"}]
    assert datasets.decode_private_tests('[{"input": "2"}]') == [{"input": "2"}]
    with pytest.raises(DatasetError):
        datasets.decode_private_tests("not base64 at all!")


def test_bigcodebench_and_humaneval() -> None:
    bcb = {p.id: p for p in datasets.load_bigcodebench(FIXTURES / "bigcodebench.jsonl")}
    ref = bcb["BigCodeBench/9003"].reference
    assert isinstance(ref, UnittestReference) and ref.libs == ["numpy"] and ref.entry_point == "task_func"
    assert ref.code_prompt.startswith("import numpy")
    humaneval = datasets.load_humaneval()
    assert len(humaneval) == 164 and humaneval[0].id == "HumanEval/0"
    assert len(datasets.humaneval_canonical()) == 164
