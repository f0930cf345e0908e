"""Answer-format instructions (conductor/answer_format.py): which step gets which wording, never doubled, and the
pool file's ``[answer_format]`` table."""

from __future__ import annotations

import pytest

from conductor.answer_format import DEFAULT_FORMATS, AnswerFormat, DomainFormat, carries_format, family_of
from conductor.pool import PoolError, parse_pool
from services.verifier.extract import final_answers, last_python_block
from services.verifier.mcq import extract_choice
from services.worker_adapter.providers.sim import REVIEW_WORDS

WORKER = '[[workers]]\nname = "w"\nprovider = "openai_compatible"\nmodel = "m"\nbase_url = "http://x/v1"\n'


@pytest.mark.parametrize(
    ("domain", "family"),
    [
        ("math", "math"),
        ("AIME", "math"),
        ("gpqa", "mcq"),
        ("mmlu", "mcq"),
        ("code", "code"),
        ("general", "general"),
        (None, None),
        ("", None),
        ("poetry", None),
    ],
)
def test_domains_map_to_format_families(domain, family):
    assert family_of(domain) == family


def test_default_scope_marks_every_step_firmly_only_the_last():
    fmt = AnswerFormat()
    final = fmt.for_step("math", "What is 12*13?", "Solve it.", final=True)
    earlier = fmt.for_step("math", "What is 12*13?", "Solve it.", final=False)
    assert final == DEFAULT_FORMATS["math"].final and earlier == DEFAULT_FORMATS["math"].earlier
    assert final != earlier and "\\boxed{" in final and earlier.startswith("If ")


def test_final_scope_and_off():
    assert AnswerFormat(steps="final").for_step("mcq", "Q", "s", final=False) is None
    assert AnswerFormat(steps="final").for_step("mcq", "Q", "s", final=True) == DEFAULT_FORMATS["mcq"].final
    assert AnswerFormat(steps="off").for_step("mcq", "Q", "s", final=True) is None


def test_no_domain_or_unknown_domain_gets_nothing():
    assert AnswerFormat().for_step(None, "Q", "s", final=True) is None
    assert AnswerFormat().for_step("poetry", "Q", "s", final=True) is None


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("math", "Find x. Put your final answer within \\boxed{}."),
        ("mcq", "The last line of your response should be of the following format: 'Answer: $LETTER'"),
        ("mcq", "Reply with Answer: X where X is the option."),
        ("code", "Enclose your code within delimiters as follows.\n```python\n# YOUR CODE HERE\n```"),
        ("general", "End with a line 'Final answer: <your answer>'."),
    ],
)
def test_questions_that_carry_a_format_get_none(family, text):
    assert carries_format(family, text)
    domain = {"math": "math", "mcq": "gpqa", "code": "code", "general": "general"}[family]
    assert AnswerFormat().for_step(domain, text, "Solve it.", final=True) is None
    assert AnswerFormat().for_step(domain, "Plain question?", text, final=True) is None  # a subtask that asks


@pytest.mark.parametrize("family", ["math", "mcq", "code", "general"])
@pytest.mark.parametrize(
    "question",
    [
        "Natalia sold clips to 48 of her friends. How many clips did she sell?",
        "Which organelle is the site of oxidative phosphorylation?\nA) Ribosome\nB) Mitochondrion\nC) Golgi\nD) None",
        "Explain which option a careful answer would choose, and why the letter matters.",
    ],
)
def test_plain_questions_carry_no_format(family, question):
    assert not carries_format(family, question)


def test_default_wording_would_not_be_doubled_and_is_not_a_review_cue():
    """Each default instruction is recognised as carrying its own format (so a Conductor that copies it into a
    subtask never gets it twice), and contains none of the sim's review words (it must not change the step's task)."""
    for family, fmt in DEFAULT_FORMATS.items():
        for text in (fmt.final, fmt.earlier or ""):
            assert carries_format(family, text), (family, text)
            assert not [w for w in REVIEW_WORDS if w in text.lower()], (family, text)


def test_responses_that_follow_the_default_wording_are_verifiable():
    """The instructions ask for exactly what the verifier's extractors accept."""
    assert final_answers("Work...\n\\boxed{156}").items == ["156"]
    assert extract_choice("Reasoning.\nAnswer: C").letters == ["C"]
    assert last_python_block("Here:\n```python\nprint(1)\n```\n").strip() == "print(1)"
    assert final_answers("So <answer>Paris</answer>").items == ["Paris"]


def test_pool_file_answer_format_table():
    pool = parse_pool(
        '[answer_format]\nsteps = "final"\n[answer_format.instructions.math]\nfinal = "Box it: \\\\boxed{}."\n'
        + WORKER
    )
    assert pool.answer_format.steps == "final"
    assert pool.answer_format.for_step("math", "Q", "s", final=True) == "Box it: \\boxed{}."
    assert pool.answer_format.for_step("math", "Q", "s", final=False) is None
    assert pool.answer_format.formats()["mcq"] == DEFAULT_FORMATS["mcq"]  # other families keep the defaults
    assert parse_pool(WORKER).answer_format == AnswerFormat()  # absent table: defaults


def test_overridden_family_without_earlier_wording_uses_final_everywhere():
    fmt = AnswerFormat(instructions={"code": DomainFormat(final="One ```python block.")})
    assert fmt.for_step("code", "Q", "s", final=False) == "One ```python block."


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('[answer_format]\nsteps = "some"\n', "steps"),
        ('[answer_format]\ncolour = "red"\n', "colour"),
        ('[answer_format.instructions.maths]\nfinal = "x"\n', "maths"),
        ('[answer_format.instructions.math]\nearlier = "x"\n', "final"),
    ],
)
def test_bad_answer_format_tables_are_named(table, needle):
    with pytest.raises(PoolError, match=needle):
        parse_pool(table + WORKER)


def test_a_questions_own_text_gives_its_answer_type() -> None:
    """``answer_type`` on every benchmark the registry loads offline and every sim task, with and without the
    harness instruction: each family's questions get their family (MATH-500's two lettered-option questions are
    multiple choice by their text; RLPR's `<answer>` ones are `general`), and a question that shows none gets None."""
    import gzip
    import json
    from collections import Counter
    from pathlib import Path

    from conductor.answer_format import answer_type
    from tasks import registry

    for (
        name
    ) in registry.names():  # every offline benchmark; sim below, RLPR's and jsonl's family is "general"
        if name in ("sim", "rlpr", "jsonl"):
            continue
        for problems in registry.load_all([name]).values():
            got = Counter(answer_type(p.question) == family_of(p.domain) for p in problems)
            assert got[True] >= 0.9 * len(problems) and got[False] <= 1, (name, got)
    sim_tasks = Path(__file__).parents[2] / "tasks" / "data" / "sim_tasks.jsonl"
    for line in sim_tasks.read_text().splitlines():
        record = json.loads(line)
        bare = record["question"].split("\n\nReason step by step")[0]
        assert answer_type(record["question"]) == answer_type(bare) == family_of(record["domain"]), bare
    fixtures = Path(__file__).parents[2] / "tasks" / "fixtures"
    with gzip.open(fixtures / "math500_real.jsonl.gz", "rt") as f:
        math = Counter(answer_type(json.loads(line)["problem"]) for line in f)
    assert math["math"] >= 495 and math["mcq"] == 2, math  # of 500 real MATH-500 problems
    for text in ("Who wrote Hamlet?", "Write a haiku about autumn.", "What is the capital of France?"):
        assert answer_type(text) is None
    assert answer_type("Name the SI unit of charge.\n\nGive it inside <answer></answer> tags.") == "general"
