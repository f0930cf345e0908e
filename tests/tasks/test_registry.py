"""The benchmark registry: every shipped fixture loads in its published format, carries its harness's answer-format
instruction, and bad data is a typed error naming the benchmark and the file."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from conductor.answer_format import carries_format, family_of
from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    StdioTestsReference,
    TextReference,
    UnittestReference,
)
from tasks import hub, registry
from tasks.errors import DatasetError, MissingDataError, TaskError, UnknownTaskError
from tasks.formats import CODE_COMPLETE_FORMAT, with_format
from tasks.problem import Problem
from tasks.rlpr import load_rlpr

EXPECTED = {
    "math500": (14, "math", TextReference),
    "aime25": (4, "aime", TextReference),
    "gpqa-diamond": (4, "gpqa", TextReference),
    "mmlu": (4, "mmlu", TextReference),
    "livecodebench": (5, "code", (StdioTestsReference, FunctionalTestsReference)),  # one erratum excluded
    "bigcodebench-hard": (5, "code", UnittestReference),
    "rlpr": (8, "rlpr", TextReference),
    "humaneval": (164, "code", HumanEvalReference),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_loads_with_its_answer_format(name: str) -> None:
    count, domain, kind = EXPECTED[name]
    problems = registry.load_benchmark(name)
    assert len(problems) == count
    assert len({p.id for p in problems}) == count
    for p in problems:
        assert p.domain == domain and isinstance(p.reference, kind)
        assert carries_format(family_of(p.domain) or "", p.question), p.question[-200:]
        assert with_format(p) == p  # never doubled


def test_sim_splits_are_the_generated_family() -> None:
    held_out, train = registry.load_benchmark("sim"), registry.load_benchmark("sim:train")
    assert {p.benchmark for p in held_out} == {"sim"} and {p.benchmark for p in train} == {"sim:train"}
    assert registry.load_benchmark("sim-train") == train  # the earlier name
    assert not {p.id for p in held_out} & {p.id for p in train}
    assert len(held_out) < len(train)


def test_instructions_follow_each_reference_harness() -> None:
    gpqa = registry.load_benchmark("gpqa-diamond")[0].question
    assert gpqa.rstrip().endswith("where X is one of A, B, C, D.") and "\nA) " in gpqa
    assert registry.load_benchmark("math500")[0].question.endswith("within \\boxed{}.")
    assert registry.load_benchmark("rlpr")[0].question.endswith("<answer></answer> tags.")
    bcb = registry.load_benchmark("bigcodebench-hard")[0].question
    assert bcb.startswith(CODE_COMPLETE_FORMAT + "\n```python\nimport collections")


def test_names_are_canonicalised_and_unknown_ones_named() -> None:
    assert registry.canonical("GPQA_Diamond") == "gpqa-diamond"
    with pytest.raises(UnknownTaskError, match=r"unknown task 'gsm8k'; known: sim, math500, .*, jsonl$"):
        registry.canonical("gsm8k")


def test_every_entry_declares_a_version_splits_and_a_note() -> None:
    assert registry.names() == [
        "sim",
        "math500",
        "aime25",
        "gpqa-diamond",
        "mmlu",
        "livecodebench",
        "bigcodebench-hard",
        "rlpr",
        "humaneval",
        "replay-math-l5",
        "replay-gsm",
        "replay-crux",
        "replay-mmlu-redux",
        "jsonl",
    ]
    for entry in registry.REGISTRY.values():
        assert entry.version and entry.note and entry.eval_split in entry.splits
        assert set(entry.splits) <= {"train", "test"}
        assert entry.fixture is None or (registry.fixture_dir() / entry.fixture).is_file()
    assert registry.benchmarks() == [n for n in registry.names() if n not in ("sim", "jsonl")]
    assert registry.version("sim:train") == registry.entry("SIM").version == "1"


def test_labels_name_an_entry_and_a_split() -> None:
    assert registry.parse_label("GPQA_Diamond") == ("gpqa-diamond", "test")
    assert registry.parse_label("math500:train") == ("math500", "train")
    assert registry.parse_label("sim-train") == ("sim", "train")  # the earlier name
    assert registry.label("math500", "train") == "math500:train" and registry.label("sim", "test") == "sim"
    with pytest.raises(UnknownTaskError, match=r"^aime25 has no 'train' split; it has: test$"):
        registry.parse_label("aime25:train")
    with pytest.raises(UnknownTaskError, match=r"unknown task 'gsm8k'"):
        registry.load(registry.Source(name="gsm8k"))


def test_a_source_keeps_only_its_domains() -> None:
    kept = registry.load(registry.Source(name="sim", domains=["code"]), "test")
    assert kept and {p.domain for p in kept} == {"code"}
    with pytest.raises(
        TaskError, match=r"mmlu: no 'test' questions in domains \['math'\]; it has \['mmlu'\]"
    ):
        registry.load(registry.Source(name="mmlu", domains=["math"]))


def test_math500_uses_the_papers_100_question_test_split() -> None:
    problems = [
        Problem(
            id=f"test/x/{i}.json",
            benchmark="math500",
            question="q",
            reference=TextReference(answer="1"),
            domain="math",
        )
        for i in range(500)
    ]
    test, train = registry.math500_test(problems), registry.math500_train(problems)
    assert len(test) == 100 and test == registry.math500_test(list(reversed(problems)))
    assert len(train) == 300 and not {p.id for p in train} & {p.id for p in test}


def test_missing_file_and_malformed_record_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError, match=r"aime25: data file .*nope\.jsonl does not exist"):
        registry.load_benchmark("aime25", path=tmp_path / "nope.jsonl")
    bad = tmp_path / "aime.jsonl"
    bad.write_text(json.dumps({"id": 1, "problem": "p"}) + "\n")
    with pytest.raises(DatasetError, match=r"aime25 \(.*aime\.jsonl\): record lacks answer"):
        registry.load_benchmark("aime25", path=bad)
    bad.write_text("{not json\n")
    with pytest.raises(DatasetError, match=r"aime\.jsonl:1: not JSON"):
        registry.load_benchmark("aime25", path=bad)


def test_rlpr_reads_nested_and_json_text_rows(tmp_path: Path) -> None:
    rows = [
        {
            "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "Q1?"}],
            "reward_model": {"ground_truth": "42", "style": "rule"},
            "extra_info": {"index": 7},
            "ability": "math",
        },
        {
            "prompt": json.dumps([{"role": "user", "content": "Q2?"}]),
            "reward_model": json.dumps({"ground_truth": "x"}),
            "extra_info": "{}",
        },
    ]
    path = tmp_path / "rlpr.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = load_rlpr(path)
    assert (first.id, first.question, first.reference, first.subject) == (
        "rlpr/7",
        "Q1?",
        TextReference(answer="42", kind="auto"),
        "math",
    )
    assert (second.id, second.question) == ("rlpr/1", "Q2?")
    path.write_text(json.dumps({"prompt": [{"role": "user", "content": "Q"}], "reward_model": {}}) + "\n")
    with pytest.raises(DatasetError, match=r"RLPR row 0: .*no ground_truth"):
        load_rlpr(path)


def test_hub_rows_go_through_the_same_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in ``datasets`` module: the real one (and a network) is never used in tests."""
    rows = [{"id": "9", "problem": "P?", "answer": "12"}]
    fake = types.SimpleNamespace(load_dataset=lambda repo, config=None, split=None, **kw: rows)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    [problem] = registry.load_benchmark("aime25", hub=True)
    assert problem.id == "aime25/9" and problem.question.startswith("P?\n\n")
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=_offline))
    with pytest.raises(
        MissingDataError, match="aime25: cannot load math-ai/aime25 from the Hub: ConnectionError"
    ):
        registry.load_benchmark("aime25", hub=True)
    with pytest.raises(MissingDataError, match="no Hub copy"):
        hub.hub_file("humaneval", None)


def _offline(*args: object, **kwargs: object) -> None:
    raise ConnectionError("no network")


def test_mmlus_csv_variant_loads_as_a_local_copy() -> None:
    problems = registry.load_benchmark("mmlu", path=registry.fixture_dir() / "mmlu.csv")
    assert [p.reference.answer for p in problems] == ["B", "C"]
    assert all(p.question.endswith("one of A, B, C, D.") for p in problems)
