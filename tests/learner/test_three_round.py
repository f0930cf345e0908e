"""Three-round cascades (services/learner/three_round.py) and the ceiling script's families and cross-validated
estimate (scripts/replay_ceiling.py), on a hand-built answer matrix where tiering the escalation is what pays."""

from __future__ import annotations

import itertools

import pytest

from conductor.pool import parse_pool
from conductor.workflow import parse_completion
from services.learner import cascade
from services.learner.config import ConfigError, parse_config
from services.learner.three_round import ThreeRound, efficient, fronts, outcome
from tests.learner.test_cascade import _cell, _problem

POOL = "\n".join(
    f'[[workers]]\nname = "{name}"\nprovider = "sim"\ndescription = "{card}: {name}"\n[workers.sim]\n'
    'dataset = "x.jsonl"'
    for name, card in (("strong", "Dear Strong"), ("a", "Cheap A"), ("b", "Cheap B"), ("c", "Cheap C"))
)

VIEW = ["strong", "a", "b", "c"]


def _matrix(n: int = 40) -> tuple[list, cascade.Matrix]:
    """``strong`` is always right at $10; ``a``, ``b`` and ``c`` cost $1. Four kinds of question, in turn: a and b
    agree and are right (c is wrong); c sides with a, which is right; c sides with b, which is right; all three are
    wrong in different ways. Every pair of cheap workers differs on three questions of four, so no two-round
    cascade is right everywhere for less than $9.5 a question; [a + b], then c, then strong where c agrees with
    neither, is, at $(2 + 3 + 3 + 13) / 4 = $5.25."""
    answers = {0: ("1", "1", "9"), 1: ("1", "7", "1"), 2: ("7", "1", "1"), 3: ("7", "8", "9")}
    problems, matrix = [], {}
    for i in range(n):
        p = _problem(i)
        problems.append(p)
        a, b, c = answers[i % 4]
        matrix[p.id] = {
            "strong": _cell(True, 10.0, "1"),
            "a": _cell(a == "1", 1.0, a),
            "b": _cell(b == "1", 1.0, b),
            "c": _cell(c == "1", 1.0, c),
        }
    return problems, matrix


def test_a_rule_plays_each_round_as_written() -> None:
    _, matrix = _matrix(4)
    rule = ThreeRound("a", "b", "c", "strong")
    played = [rule.play(matrix[f"q{i}"]) for i in range(4)]
    assert played == [
        (1.0, 2.0, False, "agree"),
        (1.0, 3.0, True, "differ, matches"),
        (1.0, 3.0, True, "differ, matches"),
        (1.0, 13.0, True, "differ, new"),
    ]
    stands = ThreeRound("a", "b", "c", None)  # a two-round cascade: c's answer, whatever it is
    assert [stands.play(matrix[f"q{i}"])[0] for i in range(4)] == [1.0, 1.0, 1.0, 0.0]
    assert outcome(rule, matrix, [f"q{i}" for i in range(4)]) == (4.0, 21.0)


def test_the_front_holds_the_tiered_rule_and_only_efficient_ones() -> None:
    problems, matrix = _matrix()
    t = cascade.Tables.of(matrix, [p.id for p in problems], ["a", "b", "c", "strong"])
    front = fronts(t)
    assert front[-1][:2] == (40.0, 210.0)  # all right at $5.25 a question
    assert [x[1] for x in front] == sorted(x[1] for x in front)
    assert all(later[0] > earlier[0] for earlier, later in itertools.pairwise(front))
    assert efficient([(1.0, 5.0, "x"), (1.0, 4.0, "y"), (2.0, 6.0, "z")]) == [
        (1.0, 4.0, "y"),
        (2.0, 6.0, "z"),
    ]


def test_only_the_three_round_family_meets_a_budget_the_two_round_one_cannot() -> None:
    from scripts.replay_ceiling import ceilings, cross_validated

    problems, matrix = _matrix()
    found = ceilings(matrix, problems, VIEW, [0.8], (2, 3))
    (two,), (three,) = found[2], found[3]
    assert two["accuracy"] < 1.0 and two["cost_ratio"] <= 0.8
    assert three["accuracy"] == 1.0 and three["cost_ratio"] == pytest.approx(0.525)
    assert "if it agrees with neither, strong" in three["sets"]["replay-gsm"]
    cv = cross_validated(matrix, problems, VIEW, [0.8], (2, 3), folds=4)
    # rules of equal $ on the other folds may differ a little in $ on the fold left out (its mix of kinds)
    three_cv, two_cv = cv[(3, 0.8)], cv[(2, 0.8)]
    assert (three_cv["accuracy"], three_cv["strongest_accuracy"], three_cv["questions"]) == (1.0, 1.0, 40)
    assert three_cv["cost_ratio"] <= 0.55
    assert two_cv["accuracy"] < 1.0 and two_cv["cost_ratio"] <= 0.8


def test_choose_with_three_rounds_takes_the_tiered_rule_and_rows_teach_all_three_rounds(tmp_path) -> None:
    problems, matrix = _matrix(8)
    pool = parse_pool(POOL, base_dir=str(tmp_path))
    config = parse_config(
        'name = "t"\n[model]\npath = "m"\n[data]\nfew_shot = false\nrules = false\nrounds = 2\n[grpo]\nsteps = 0\n'
    )
    two = cascade.choose(matrix, problems, VIEW, budget=0.8, cheap=4)
    choice = cascade.choose(matrix, problems, VIEW, budget=0.8, cheap=4, rounds=3)
    assert two.figures["accuracy"] < 1.0
    rule = choice.per_set["replay-gsm"]
    assert isinstance(rule, ThreeRound) and {rule.a, rule.b} == {"a", "b"} and rule.c == "c"
    assert (rule.d, choice.figures["accuracy"], choice.figures["cost_ratio"]) == ("strong", 1.0, 0.525)
    rows = cascade.rows([choice], problems, matrix, pool, config)
    # 8 first rounds, 8 second rounds, and a third round on the 6 questions whose pair differed
    assert len(rows) == 8 + 8 + 6
    shown = [r["prompt"][-1]["content"] for r in rows]
    said = [r["completion"][0]["content"] for r in rows]
    for text in said:
        assert parse_completion(text, n_workers=4, allow_empty=True).workflow is not None
    first = next(t for t in said if "This is" in t)
    assert (
        "if their answers differ, Cheap C is Model 3 breaks the tie, and if it sides with neither, Model 0"
        in first
    )
    thirds = [(p, c) for p, c in zip(shown, said, strict=True) if "Across rounds" in p]
    assert len(thirds) == 6
    matched = [c for p, c in thirds if "matches an earlier round's step" in p]
    fresh = [c for p, c in thirds if "matches no earlier round's step" in p]
    assert len(matched) == 4 and all("model_id = []" in c for c in matched)  # the tie-breaker stands
    assert len(fresh) == 2 and all("model_id = [0]" in c for c in fresh)  # the strong worker, afresh
    seconds = [c for p, c in zip(shown, said, strict=True) if "### Round 1" in p and "### Round 2" not in p]
    assert sum("model_id = [3]" in c for c in seconds) == 6  # the tie-breaker where the pair differed


def test_three_round_rules_need_a_card_with_two_recursion_rounds() -> None:
    text = 'name = "t"\n[model]\npath = "m"\n[data]\nrounds = 1\n[grpo]\nsteps = 0\n[cold_start.cascade]\nrounds = 3\n'
    with pytest.raises(ConfigError, match=r"rounds = 3 .* needs data.rounds >= 2 \(got 1\)"):
        parse_config(text)
    assert parse_config(text.replace("rounds = 1", "rounds = 2")).cold_start.cascade.rounds == 3
