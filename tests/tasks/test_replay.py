"""Replay tables: typed loading, lookups, typed errors, prices, the split rules and the registry entries."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from conductor.pool import load_pool
from tasks import registry, replay
from tasks.answers import LITERAL_DOMAIN
from tasks.errors import DatasetError, MissingDataError, TaskError

DATA = Path(replay.__file__).parent / "data"
RECORD = {
    "id": "7",
    "set": "math-l5",
    "question": "What is $1+1$?",
    "prompt": None,
    "choices": None,
    "gold": "2",
    "answers": {"m": {"text": '{"reasoning": "adding", "answer": "2"}', "chars": 36}},
}


def write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    return path


def test_the_shipped_tables_load_with_every_model_on_every_record() -> None:
    index = replay.load_index("")
    counts = {s: sum(r.set == s for r in index.records) for s in replay.SETS}
    assert counts == {"math-l5": 539, "gsm": 1004, "crux": 603, "mmlu-redux": 3999 + 288}
    for s in replay.ZEROEVAL_SETS:
        assert all(set(r.answers) == set(replay.ZEROEVAL_MODELS) for r in index.records if r.set == s)
    assert index.models("mmlu-redux") == set(replay.MMLU_MODELS)
    assert replay.load_index("") is index  # read once per spec
    assert not any(replay.is_held_out(r.set, r.id) for r in index.records)  # the public part only


def test_lookups_by_key_question_prompt_and_task_id() -> None:
    index = replay.load_index("")
    record = index.get("gsm", "gsm8k-main-test-#0")
    assert record is not None and record.gold == "# 18"
    assert index.by_question("  " + record.question.upper() + "\n") is record
    assert index.find(f"Context.\n{record.question}\n\nSolve it.") is record
    assert index.by_task_id(replay.item_task_id("gsm", "gsm8k-main-test-#0")) is record
    assert index.by_task_id("eval-abc." + replay.item_task_id("gsm", "gsm8k-main-test-#0")) is record
    assert index.find("A question nobody recorded.") is None
    with pytest.raises(replay.NoRecordError, match="no replay record"):
        index.lookup(task_id="t-1", prompt="A question nobody recorded.")


def test_multiple_choice_records_sharing_a_question_are_told_apart_by_their_options() -> None:
    index = replay.load_index("")
    shared: dict[str, list[replay.ReplayRecord]] = {}
    for r in index.records:
        if r.set == "mmlu-redux":
            shared.setdefault(r.question, []).append(r)
    twins = next(rs for rs in shared.values() if len(rs) > 1 and rs[0].choices != rs[1].choices)
    for r in twins:
        prompt = registry.datasets.render_choices(r.question, r.choices or [])
        assert index.find(prompt) is r


def test_paths_join_files_and_folders_and_the_first_table_wins(tmp_path: Path) -> None:
    first = write(tmp_path / "a.jsonl.gz", [json.dumps(RECORD)])
    folder = tmp_path / "more"
    folder.mkdir()
    write(folder / "b.jsonl.gz", [json.dumps({**RECORD, "gold": "3"}), json.dumps({**RECORD, "id": "8"})])
    index = replay.load_index(f"{first}:{folder}")
    assert len(index) == 2 and index.get("math-l5", "7").gold == "2"
    assert index.sources == [str(first), str(folder / "b.jsonl.gz")]


def test_bad_tables_are_one_line_typed_errors(tmp_path: Path) -> None:
    with pytest.raises(replay.ReplayFileError, match="does not exist") as missing:
        replay.load_index(str(tmp_path / "none.jsonl.gz"))
    assert isinstance(missing.value, MissingDataError)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(replay.ReplayFileError, match="holds no"):
        replay.table_files(str(empty))
    bad = write(tmp_path / "bad.jsonl.gz", [json.dumps(RECORD), "", '{"id": 1}'])
    with pytest.raises(replay.ReplayFormatError, match=rf"^{bad}:3: not a replay record") as malformed:
        replay.read_table(bad)
    assert isinstance(malformed.value, DatasetError) and "\n" not in str(malformed.value)
    (tmp_path / "plain.jsonl.gz").write_text("not gzip")
    with pytest.raises(replay.ReplayFormatError, match="not a gzip"):
        replay.read_table(tmp_path / "plain.jsonl.gz")
    answerless = write(tmp_path / "answerless.jsonl.gz", [json.dumps({**RECORD, "answers": {}})])
    with pytest.raises(replay.ReplayFormatError, match=":1: a record needs"):
        replay.read_table(answerless)
    with pytest.raises(replay.UnknownModelError, match=r"\['nobody'\] not in the replay tables"):
        replay.load_index("").check_models(["nobody", "gpt-4o-2024-08-06"])
    assert issubclass(replay.ReplayError, TaskError)


def test_the_split_rules_are_the_documented_hashes() -> None:
    assert replay.is_held_out("gsm", "x") == (hashlib.sha256(b"gsm:x").digest()[0] < 64)
    salted = hashlib.sha256(b"conductor-replay-test:crux:crux-test-#1").digest()[0] < 77
    assert replay.in_test_split("crux", "crux-test-#1") == salted
    index = replay.load_index("")
    shares = [replay.in_test_split(r.set, r.id) for r in index.records]
    assert 0.25 < sum(shares) / len(shares) < 0.35


@pytest.mark.parametrize("name", ["replay_pool", "replay_pool_no_o1", "mmlu_pool"])
def test_pool_prices_are_the_shipped_prices(name: str) -> None:
    prices = replay.load_prices()
    pool = load_pool(DATA / f"{name}.toml")
    for w in pool.workers:
        assert w.replay is not None
        price = prices[w.replay.model]
        assert (w.price_in_per_mtok, w.price_out_per_mtok) == (price.input, price.output), w.name
    expected = {"replay_pool": 12, "replay_pool_no_o1": 11, "mmlu_pool": 14}[name]
    assert len(pool.workers) == expected
    assert ("o1-mini-2024-09-12" in pool.names()) == (name == "replay_pool")


def test_registry_entries_split_the_shipped_part_and_carry_answer_formats() -> None:
    sizes = {"math-l5": 539, "gsm": 1004, "crux": 603, "mmlu-redux": 3999}
    domains = {"math-l5": "math", "gsm": "math", "crux": LITERAL_DOMAIN, "mmlu-redux": "mcq"}
    index = replay.load_index("")
    for set_name, size in sizes.items():
        test = registry.load_benchmark(f"replay-{set_name}")
        train = registry.load_benchmark(f"replay-{set_name}:train")
        assert len(test) + len(train) == size and not {p.id for p in test} & {p.id for p in train}
        assert {p.domain for p in test} == {domains[set_name]}
        record = index.find(test[0].question)  # the replay provider finds the question under its instruction
        assert record is not None and (record.set, record.id) == (set_name, test[0].id)
    gsm = registry.load_benchmark("replay-gsm:train")
    assert next(p for p in gsm if p.id == "gsm8k-main-test-#0").reference.answer == "18"
    mmlu = registry.load_benchmark("replay-mmlu-redux")[0]
    assert mmlu.reference.kind == "mcq" and "\nA) " in mmlu.question


def test_a_held_out_file_is_read_whole_as_the_test_split(tmp_path: Path) -> None:
    ids = [str(n) for n in range(40)]
    held = [i for i in ids if replay.is_held_out("math-l5", i)]
    path = write(tmp_path / "held.jsonl.gz", [json.dumps({**RECORD, "id": i}) for i in held])
    found = registry.load_all(["replay-math-l5"], {"replay-math-l5": str(path)})["replay-math-l5"]
    assert [p.id for p in found] == held
    other = write(tmp_path / "gsm.jsonl.gz", [json.dumps({**RECORD, "set": "gsm"})])
    with pytest.raises(DatasetError, match="no 'math-l5' records"):
        registry.load_benchmark("replay-math-l5", path=other)


def test_literal_answers_compare_as_evaluated_python_literals() -> None:
    from tasks import literal

    assert (
        literal.grade("[1,2]", "[1, 2]")[0] and literal.grade("{2: None, 1: None}", "{1: None, 2: None}")[0]
    )
    assert literal.grade("abc", "'abc'")[0]  # a bare word read as the string a JSON answer meant
    assert not literal.grade("[1, 2", "[1, 2]")[0] and not literal.grade("'1'", "1")[0]
    assert not literal.grade("[" * 200 + "]" * 200, "[]")[0]  # too deep: no answer, no RecursionError
    assert literal.canonical("(1,2)") == literal.canonical("(1, 2)") != literal.canonical("[1, 2]")


def test_the_verifier_reads_zeroeval_json_answers() -> None:
    from services.verifier.extract import final_answers

    opening = '```json\n{"reasoning": "so \\\\boxed{3} first", "answer": "\\frac{1}{2}"}\n```'
    assert final_answers(opening).items == [
        "\\frac{1}{2}"
    ]  # the field, not a box in the reasoning; LaTeX kept
    assert final_answers('{"reasoning": "r", "answer": [1, 2]}').items == ["[1, 2]"]
    assert final_answers('Working.\n\\boxed{4}\n{"answer": "5"}').items == [
        "4"
    ]  # not the JSON form: markers first
    assert final_answers('Working.\n"answer": "5"').items == ["5"]  # nothing else marks an answer


def test_a_final_answer_cue_followed_by_the_json_object_reads_the_object() -> None:
    from services.verifier.extract import final_answers

    text = 'Solving, c = 36.\n\nThe final answer is: \n```json\n{\n    "reasoning": "r",\n    "answer": "36"\n}\n```'
    assert final_answers(text).items == ["36"]


def test_the_zeroeval_rule_reproduces_its_published_figures() -> None:
    """../shared/replay/README.md: o1-mini 88.7% on math-l5, Claude-3.5-Sonnet 96.8% on gsm, 88.9% on MMLU-Redux."""
    from scripts.replay_grades import zeroeval_correct

    index = replay.load_index("")
    for set_name, model, expected in (
        ("math-l5", "o1-mini-2024-09-12", 88.7),
        ("gsm", "claude-3-5-sonnet-20241022", 96.8),
        ("mmlu-redux", "anthropic_claude-3-5-sonnet-20240620", 88.9),
    ):
        rows = [r for r in index.records if r.set == set_name and r.error_type in ("", "ok")]
        right = sum(zeroeval_correct(set_name, model, r.answers[model].text, str(r.gold))[0] for r in rows)
        assert round(100 * right / len(rows), 1) == expected


def test_zeroeval_arithmetic_is_computed_without_eval() -> None:
    """ZeroEval's rule evaluates a math answer with a '/' in it; ours computes the same value without ``eval``, and a
    recorded answer's runaway exponent stays text instead of hanging the grading."""
    from scripts.replay_grades import _sanitise

    assert _sanitise("3/4") == "0.75" and _sanitise("(1+2)/3") == "1.0" and _sanitise("2**3/4") == "2.0"
    assert _sanitise("9**9**9**9/2") == "9**9**9**9/2" and _sanitise("1/0") == "1/0"
