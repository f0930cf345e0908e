"""A user's own JSONL tasks through the registry: each verifier type builds its reference, fields are remapped, and
every malformed record is one DatasetError naming file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    IOTest,
    TextReference,
    UnittestReference,
)
from tasks import jsonl, registry
from tasks.errors import DatasetError, MissingDataError, TaskError
from tasks.formats import GENERAL_FORMAT
from tasks.registry import Source


def _file(tmp_path: Path, *rows: object, name: str = "mine.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_text_verifiers_and_the_default_domain(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        {"question": "Capital of France?", "answer": "Paris"},
        {"id": "x", "question": "Pick one.", "answer": "B", "choices": ["a", "b"], "domain": "mcq"},
    )
    first, second = registry.load(Source(name="jsonl", path=str(path), verifier="exact"))
    assert (first.id, first.benchmark, first.domain) == ("mine/1", "jsonl", "general")
    assert first.reference == TextReference(answer="Paris", kind="exact")
    assert first.question == f"Capital of France?\n\n{GENERAL_FORMAT}"  # the domain's harness instruction
    assert second.id == "mine/x" and second.domain == "mcq" and second.question.endswith("one of A, B, C, D.")
    assert second.reference == TextReference(answer="B", kind="exact", choices=["a", "b"])
    [auto] = registry.load(
        Source(name="jsonl", path=str(_file(tmp_path, {"question": "q", "answer": 3}, name="a.jsonl")))
    )
    assert auto.reference == TextReference(answer="3", kind="auto")  # the default verifier type


def test_code_verifiers_read_their_reference_fields(tmp_path: Path) -> None:
    functional = {
        "title": "Add",
        "tests": [{"input": "1\n2", "output": "3"}],
        "fn": "add",
        "starter_code": "class Solution:\n    def add(self, a, b):\n        pass",
    }
    [p] = jsonl.load(
        _file(tmp_path, functional), verifier="functional", fields={"question": "title", "func_name": "fn"}
    )
    assert p.domain == "code" and p.reference == FunctionalTestsReference(
        func_name="add", tests=[IOTest(input="1\n2", output="3")], starter_code=functional["starter_code"]
    )
    unit = {"question": "q", "test": "class TestCases: ...", "libs": ["numpy"]}
    [u] = jsonl.load(_file(tmp_path, unit, name="u.jsonl"), verifier="unittest")
    assert u.reference == UnittestReference(test="class TestCases: ...", libs=["numpy"])
    he = {"question": "def f():", "prompt": "def f():", "test": "def check(c): pass", "entry_point": "f"}
    [h] = jsonl.load(_file(tmp_path, he, name="h.jsonl"), verifier="humaneval")
    assert h.reference == HumanEvalReference(prompt="def f():", test="def check(c): pass", entry_point="f")


def test_every_malformed_record_names_file_and_line(tmp_path: Path) -> None:
    cases = [
        ('{"question": "q", "answer": "1"}\n[1, 2]\n', ":2: a record must be a JSON object"),
        ('{"question": "q", "answer": "1"}\n\n{"answer": "2"}\n', ":3: no question text under 'question'"),
        ('{"question": "q"}\n', ":1: no answer under 'answer'"),
        (
            '{"question": "q", "answer": "1"}\n{"question": "r", "answer": "2", "id": 1}\n',
            ":2: id 'mine/1' already on line 1",
        ),
        (
            '{"question": "q", "answer": "1", "choices": "a,b"}\n',
            ":1: not a 'math' reference: Expected `array",
        ),
        ("", ": no records"),
    ]
    for text, message in cases:
        path = tmp_path / "mine.jsonl"
        path.write_text(text)
        with pytest.raises(DatasetError) as info:
            registry.load(Source(name="jsonl", path=str(path), verifier="math"))
        assert str(info.value).startswith(f"jsonl: {path}{message}"), str(info.value)
    path.write_text('{"question": "q"}\n')
    with pytest.raises(
        DatasetError, match=r"mine\.jsonl:1: not a 'stdio' reference: Object missing required field `tests`"
    ):
        jsonl.load(path, verifier="stdio")


def test_bad_sources_are_named_before_any_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match="jsonl: give path = your task file"):
        registry.load(Source(name="jsonl"))
    with pytest.raises(
        TaskError, match="unknown verifier type 'regex'; known: auto, math, mcq, exact, stdio"
    ):
        registry.check(Source(name="jsonl", path="x.jsonl", verifier="regex"))
    with pytest.raises(TaskError, match=r"fields maps \['tests'\], which a 'math' task does not have"):
        registry.check(Source(name="jsonl", path="x.jsonl", verifier="math", fields={"tests": "cases"}))
    with pytest.raises(TaskError, match="mmlu: verifier, domain and fields describe a jsonl file"):
        registry.check(Source(name="mmlu", verifier="mcq"))
    with pytest.raises(TaskError, match="sim: the family is generated; it reads no file"):
        registry.check(Source(name="sim", path="x.jsonl"))
    with pytest.raises(MissingDataError, match=r"jsonl: data file .*nope\.jsonl does not exist"):
        registry.load(Source(name="jsonl", path=str(tmp_path / "nope.jsonl")))
