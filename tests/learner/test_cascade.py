"""The cascade search (services/learner/cascade.py): exact values on a hand-built answer matrix, the budget rule,
and rows for both rounds that the policy is served the same way."""

from __future__ import annotations

import pytest

from conductor.pool import parse_pool
from schemas.verify import TextReference
from services.learner import cascade
from services.learner.cascade import Cascade, Cell
from services.learner.config import ConfigError, parse_config
from tasks.problem import Problem

POOL = """
[[workers]]
name = "strong"
provider = "sim"
description = "Dear Strong (2024): dear and strong"
[workers.sim]
dataset = "x.jsonl"
[[workers]]
name = "cheap-a"
provider = "sim"
description = "Cheap A: cheap a"
[workers.sim]
dataset = "x.jsonl"
[[workers]]
name = "cheap-b"
provider = "sim"
description = "Cheap B: cheap b"
[workers.sim]
dataset = "x.jsonl"
"""


def _problem(i: int, bench: str = "replay-gsm") -> Problem:
    return Problem(
        id=f"q{i}",
        benchmark=bench,
        question=f"Question {i}?",
        reference=TextReference(answer="1"),
        domain="math",
    )


def _cell(right: bool, cost: float, answer: str | None) -> Cell:
    return Cell(reward=1.0 if right else 0.5, cost=cost, response=f"\\boxed{{{answer}}}", answer=answer)


def _matrix(n: int = 40) -> tuple[list[Problem], cascade.Matrix]:
    """The strong worker is always right at $10; the cheap two are right on 3 of 4 questions at $1 — and where
    one is wrong the two differ, so 'escalate on disagreement' is exactly right everywhere."""
    problems, matrix = [], {}
    for i in range(n):
        p = _problem(i)
        problems.append(p)
        a_right, b_right = i % 4 != 1, i % 4 != 2
        matrix[p.id] = {
            "strong": _cell(True, 10.0, "1"),
            "cheap-a": _cell(a_right, 1.0, "1" if a_right else "7"),
            "cheap-b": _cell(b_right, 1.0, "1" if b_right else "8"),
        }
    return problems, matrix


def test_play_hands_back_on_agreement_and_escalates_on_disagreement() -> None:
    _, matrix = _matrix()
    c = Cascade(
        first=("cheap-a", "cheap-b"), then=(("agree", None), ("differ", "strong"), ("missing", "strong"))
    )
    assert cascade.play(c, matrix["q0"]) == (1.0, 2.0, False, "agree")
    assert cascade.play(c, matrix["q1"]) == (1.0, 12.0, True, "differ")
    out = cascade.evaluate(c, matrix, list(matrix))
    assert out.accuracy == 1.0 and out.mean_cost == pytest.approx(2.0 + 10.0 * 0.5)


def test_the_budget_picks_the_cheap_cascade_and_no_budget_the_best_worker() -> None:
    problems, matrix = _matrix()
    view = ["strong", "cheap-a", "cheap-b"]
    tight = cascade.choose(matrix, problems, view, budget=0.8, cheap=3)
    c = tight.per_set["replay-gsm"]
    assert (
        set(c.first) == {"cheap-a", "cheap-b"}
        and c.action("agree") is None
        and c.action("differ") == "strong"
    )
    assert tight.figures["accuracy"] == 1.0 and tight.figures["cost_ratio"] == pytest.approx(0.7)
    # at 0.1 of the strong worker's $ nothing reaches it: one cheap worker answers (75%)
    cheapest = cascade.choose(matrix, problems, view, budget=0.1, cheap=3)
    assert cheapest.figures["accuracy"] == 0.75 and cheapest.figures["cost"] == 1.0
    with pytest.raises(ValueError, match="no cascade"):
        cascade.choose(matrix, problems, view, budget=0.05, cheap=3)


def test_states_agree_with_the_shown_agreement() -> None:
    _, matrix = _matrix(8)
    ids = list(matrix)
    workers = ["cheap-a", "cheap-b", "strong"]
    t = cascade.Tables.of(matrix, ids, workers)
    for first in [(0, 1), (0, 2), (0, 1, 2), (1,)]:
        names = [workers[i] for i in first]
        got = [cascade.STATES[s] for s in t.states(first)]
        assert got == [cascade.state_of(matrix[pid], names) for pid in ids]


def test_rows_for_both_rounds_show_the_step_answers(tmp_path) -> None:
    problems, matrix = _matrix(8)
    pool = parse_pool(POOL, base_dir=str(tmp_path))
    config = parse_config(
        'name = "t"\n[model]\npath = "m"\n[data]\nfew_shot = false\nrules = false\n[grpo]\nsteps = 0\n'
    )
    choice = cascade.choose(matrix, problems, ["strong", "cheap-a", "cheap-b"], budget=0.8, cheap=3)
    rows = cascade.rows([choice], problems, matrix, pool, config)
    assert len(rows) == 2 * len(problems)
    first = rows[0]["completion"][0]["content"]
    assert "answer it independently" in first and "access_list = [[], []]" in first
    shown = [r["prompt"][-1]["content"] for r in rows]
    assert sum("All steps gave the same final answer." in t for t in shown) == 4  # q0, q3, q4, q7
    assert sum("The steps gave different final answers." in t for t in shown) == 4  # one cheap worker wrong
    agreed = next(r for r, t in zip(rows, shown, strict=True) if "same final answer" in t)
    differed = next(r for r, t in zip(rows, shown, strict=True) if "different final answers" in t)
    assert "model_id = []" in agreed["completion"][0]["content"]
    assert "The steps gave different final answers." in differed["prompt"][-1]["content"]
    assert "model_id = [0]" in differed["completion"][0]["content"]  # the strong worker, Model 0 of the view
    # each worker is named, by its card's first words, before its number: what stays the same across views
    assert (
        "The strongest model here is Dear Strong (2024), Model 0. Cheap A is Model 1 and Cheap B is Model 2;"
        in first
    )
    assert "they answer it independently; if their answers differ, Model 0 decides." in first
    assert (
        "so Dear Strong (2024) is Model 0; it answers the question afresh."
        in differed["completion"][0]["content"]
    )


def test_the_same_worker_keeps_its_name_in_a_view_that_numbers_it_otherwise(tmp_path) -> None:
    problems, matrix = _matrix(8)
    pool = parse_pool(POOL, base_dir=str(tmp_path))
    config = parse_config('name = "t"\n[model]\npath = "m"\n[grpo]\nsteps = 0\n')
    wide = cascade.choose(matrix, problems, ["strong", "cheap-a", "cheap-b"], budget=0.8, cheap=3)
    narrow = cascade.choose(matrix, problems, ["cheap-a", "cheap-b"], budget=1.0, cheap=3)
    got = cascade.rows([wide, narrow], problems, matrix, pool, config)
    texts = [r["completion"][0]["content"] for r in got]
    assert any("Cheap A is Model 1" in t for t in texts) and any("Cheap A is Model 0" in t for t in texts)


def test_a_row_limit_draws_evenly_over_view_set_round_and_state(tmp_path) -> None:
    problems, matrix = _matrix(40)  # 40 first-round rows; second round: 20 agree, 20 differ
    pool = parse_pool(POOL, base_dir=str(tmp_path))
    config = parse_config('name = "t"\n[model]\npath = "m"\n[grpo]\nsteps = 0\n')
    choice = cascade.choose(matrix, problems, ["strong", "cheap-a", "cheap-b"], budget=0.8, cheap=3)
    every = cascade.rows([choice], problems, matrix, pool, config)
    assert len(every) == 80
    got = cascade.rows([choice], problems, matrix, pool, config, limit=30, seed=1)
    assert len(got) == 30 and all(r in every for r in got)
    last = [r["prompt"][-1]["content"] for r in got]
    differ = sum("different final answers" in t for t in last)
    agree = sum("same final answer" in t for t in last)
    assert (differ, agree, 30 - differ - agree) == (10, 10, 10)
    assert got == cascade.rows([choice], problems, matrix, pool, config, limit=30, seed=1)  # seeded
    weighted = cascade.rows([choice], problems, matrix, pool, config, limit=40, seed=1, first_weight=2)
    firsts = sum(
        "Question:" in r["prompt"][-1]["content"] and "final answer" not in r["prompt"][-1]["content"]
        for r in weighted
    )
    assert firsts == 20  # a first round's group drawn twice a turn: 2 of every 4 rows
    rare = [every[0]]  # a group smaller than its share gives all it has; the others fill the rest
    assert len(cascade.balanced([rare, every[1:40]], 10, 0)) == 10 and every[0] in cascade.balanced(
        [rare, every[1:40]], 10, 0
    )


def test_slack_keeps_the_cheapest_rule_within_that_many_points_of_the_strongest() -> None:
    problems, matrix = _matrix()
    view = ["strong", "cheap-a", "cheap-b"]

    def chosen(slack: float) -> cascade.Choice:
        return cascade.choose(matrix, problems, view, budget=1.0, cheap=3, select="slack", slack=slack)

    exact = chosen(
        0.0
    )  # the strong worker's 100%, at 0.7 of its $: the cheap pair, escalating on disagreement
    assert exact.figures["accuracy"] == 1.0 and exact.figures["cost_ratio"] == pytest.approx(0.7)
    assert chosen(20.0).figures["accuracy"] == 1.0  # one cheap worker's 75% is 25 points short
    loose = chosen(25.0)
    assert loose.figures["accuracy"] == 0.75 and loose.figures["cost"] == 1.0
    assert loose.per_set["replay-gsm"].first in {("cheap-a",), ("cheap-b",)}


def test_escalate_strongest_calls_only_the_most_accurate_worker() -> None:
    """A middle worker, right wherever the cheap pair differ at $3, is the cheaper escalation; ``strongest`` forbids
    it, since the strong worker is the view's most accurate."""
    problems, matrix = _matrix()
    for i, pid in enumerate(matrix):
        right = i % 4 != 0
        matrix[pid]["mid"] = _cell(right, 3.0, "1" if right else "9")
    view = ["strong", "mid", "cheap-a", "cheap-b"]

    def action(escalate: str) -> str | None:
        got = cascade.choose(
            matrix, problems, view, budget=1.0, cheap=4, select="slack", slack=0.0, escalate=escalate
        )
        c = got.per_set["replay-gsm"]
        assert set(c.first) == {"cheap-a", "cheap-b"} and got.figures["accuracy"] == 1.0
        return c.action("differ")

    assert action("any") == "mid"
    assert action("strongest") == "strong"


def test_a_slack_list_must_name_one_value_per_view() -> None:
    text = (
        'name = "t"\n[model]\npath = "m"\n[data]\nrounds = 1\nmax_steps = 3\n'
        'views = [["strong", "cheap-a"], ["cheap-a", "cheap-b"]]\n[grpo]\nsteps = 0\n'
        '[cold_start.cascade]\nselect = "slack"\nslack = [1.0, 0.0, 2.0]\n'
    )
    with pytest.raises(ConfigError, match=r"cascade\.slack lists 3 values for 2 view"):
        parse_config(text)


def test_the_ceiling_is_the_best_cascade_at_each_budget_chosen_on_the_questions_themselves() -> None:
    from scripts.replay_ceiling import ceilings

    problems, matrix = _matrix()
    low, mid, high = ceilings(matrix, problems, ["strong", "cheap-a", "cheap-b"], [0.05, 0.25, 0.75])[2]
    assert "no cascade costs at most 0.05" in low["error"]
    assert mid["accuracy"] == 0.75 and mid["cost_ratio"] <= 0.25  # one cheap worker, or the pair handing back
    assert high["accuracy"] == 1.0 and high["cost_ratio"] == pytest.approx(0.7)  # escalate on disagreement
    assert high["strongest"] == "strong" and high["strongest_accuracy"] == 1.0
    assert "differ→strong" in high["sets"]["replay-gsm"]
