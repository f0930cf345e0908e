"""The Conductor prompt: the paper's structure, hidden names, parseable examples, and the recursion prompt."""

from __future__ import annotations

import pytest

from conductor.prompt import (
    EXAMPLE_MODELS,
    FEW_SHOT,
    MAX_SHOWN_RESPONSE_CHARS,
    conductor_messages,
    model_lines,
    policy_messages,
    recursion_messages,
)
from conductor.workflow import parse_completion
from schemas.plan import WorkerCard
from tests.planner.samples import PRIOR


def test_first_round_prompt_has_the_papers_structure(cards: list[WorkerCard]) -> None:
    system, user = conductor_messages("What is 6 * 7?", cards, max_steps=5)
    assert (system.role, user.role) == ("system", "user")
    for piece in (
        "coordinating a team of language models",
        "at most 5 steps",
        "first step's model receives the user's question",
        "history you grant it",
        "last step is returned to the user",
        "model_id",
        "subtasks",
        "access_list",
        '["all"]',
        "[] to see none",
        "Example 4",
    ):
        assert piece in system.content, piece
    assert user.content.startswith("Question:\nWhat is 6 * 7?")
    assert "Model 0: Large frontier generalist" in user.content
    assert "Model 4: Small fast model" in user.content


def test_worker_names_hidden_unless_revealed(cards: list[WorkerCard]) -> None:
    system, user = conductor_messages("q", cards, max_steps=5)
    assert not any(
        name in system.content + user.content for name in ("sim-frontier", "sim-math", "sim-small")
    )
    revealed = [WorkerCard(index=0, description="Generalist.", name="gpt-5")]
    assert model_lines(revealed) == "Model 0 (gpt-5): Generalist."


def test_max_steps_and_domain_reach_the_prompt(cards: list[WorkerCard]) -> None:
    system, user = conductor_messages("q", cards, max_steps=3, domain="math")
    assert "at most 3 steps" in system.content
    assert "Answer type: math" in user.content


def test_few_shot_examples_are_out_of_domain_and_parse() -> None:
    """docs/method.md §1: one medical MCQ, one limit, two Countdown puzzles, all real successful-looking completions."""
    assert len(FEW_SHOT) == 4
    assert "(C) Right coronary artery" in FEW_SHOT[0].question
    assert r"\lim" in FEW_SHOT[1].question
    assert all("Using the numbers" in ex.question for ex in FEW_SHOT[2:])
    for ex in FEW_SHOT:
        parsed = parse_completion(ex.completion, n_workers=len(EXAMPLE_MODELS))
        assert parsed.reasoning and 2 <= len(parsed.workflow) <= 3
        assert parsed.workflow.access_list[-1] == "all"


def test_recursion_prompt_shows_the_earlier_round_and_the_choice(cards: list[WorkerCard]) -> None:
    system, user = recursion_messages("What is 6 * 7?", cards, PRIOR, max_steps=5)
    assert "Example 1" in system.content
    assert PRIOR[0].completion in user.content
    assert "Result of the coordination strategy (final response):\n42" in user.content
    assert "model_id = [], subtasks = [], access_list = []" in user.content
    assert "also grants the result above" in user.content
    assert user.content.index("Question:") < user.content.index("### Round 1")


def test_recursion_prompt_truncates_a_huge_final_response(cards: list[WorkerCard]) -> None:
    from schemas.plan import PriorRound

    huge = [PriorRound(completion="c", final_response="x" * (MAX_SHOWN_RESPONSE_CHARS * 3))]
    _, user = recursion_messages("q", cards, huge, max_steps=5)
    assert "[... truncated]" in user.content
    assert len(user.content) < MAX_SHOWN_RESPONSE_CHARS + 3000


def test_prompt_styles_trim_the_system_turn(cards: list[WorkerCard]) -> None:
    full = policy_messages("What is 6 * 7?", cards, max_steps=5, style="examples")
    rules = policy_messages("What is 6 * 7?", cards, max_steps=5, style="rules")
    task = policy_messages("What is 6 * 7?", cards, max_steps=5, style="task")
    assert full == conductor_messages("What is 6 * 7?", cards, max_steps=5)
    assert FEW_SHOT[0].question in full[0].content and FEW_SHOT[0].question not in rules[0].content
    assert rules[0].role == "system" and "access_list" in rules[0].content
    assert [m.role for m in task] == ["user"] and task[0] == full[1]
    again = policy_messages("What is 6 * 7?", cards, PRIOR, max_steps=5, style="task")
    assert [m.role for m in again] == ["user"] and "Result of the coordination strategy" in again[0].content


def test_an_unknown_prompt_style_is_refused(cards: list[WorkerCard]) -> None:
    with pytest.raises(ValueError, match="prompt style 'short'"):
        policy_messages("q", cards, max_steps=5, style="short")
