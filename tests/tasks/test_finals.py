"""Each step's final answer as a recursion round shows it (tasks/finals.py), and the prompt lines built from it."""

from __future__ import annotations

import random

from conductor.answers import agreement, same_answer
from conductor.prompt import recursion_messages
from schemas.plan import PriorRound, StepAnswer, WorkerCard
from schemas.solve import StepRecord
from tasks import finals
from tasks.finals import MAX_SHOWN_ANSWER_CHARS, json_answer, step_answer, step_answers


def test_zeroeval_json_answers_are_read() -> None:
    text = 'Sure.\n```json\n{\n    "reasoning": "2 + 2",\n    "answer": "4"\n}\n```'
    assert json_answer(text) == "4"
    assert step_answer(text) == "4"
    assert json_answer('{"reasoning": "x", "answer": 18}') == "18"


def test_malformed_json_still_yields_the_quoted_answer() -> None:
    # LaTeX's backslashes are not valid JSON escapes: the value is still the one written
    text = '{"reasoning": "We get \\frac12.", "answer": "\\frac{1}{2}"}'
    assert step_answer(text) == "\\frac{1}{2}"


def test_boxes_and_cue_lines_when_there_is_no_json() -> None:
    assert step_answer("So we get \\boxed{12} and then \\boxed{13}.") == "13"
    assert step_answer("Working...\nFinal answer: 7.") == "7"
    assert step_answer("I do not know.") is None
    assert step_answer("<think>\\boxed{1}</think> The answer: 2") == "2"


def test_multiple_choice_shows_the_letter() -> None:
    assert step_answer('{"answer": "C) Paris"}', "mcq") == "C"
    assert step_answer("Reasoning.\nAnswer: B", "mcq") == "B"


def test_long_answers_are_cut() -> None:
    shown = step_answer("\\boxed{" + "x" * 500 + "}")
    assert shown is not None and len(shown) == MAX_SHOWN_ANSWER_CHARS and shown.endswith("…")


def test_agreement() -> None:
    assert same_answer("18", "18.0") and same_answer("\\dfrac{1}{2}", "\\frac{1}{2}")
    assert not same_answer("18", "19") and not same_answer(None, "1")
    assert agreement(["18", "18.0"]) == "agree"
    assert agreement(["18", "19"]) == "differ"
    assert agreement(["18", None]) == "missing"
    assert agreement([None, None]) == "missing"


def test_the_recursion_prompt_lists_each_steps_answer_and_whether_they_agree() -> None:
    steps = [
        StepRecord(index=0, model_id=2, worker="a", subtask="s", access=[], response='{"answer": "5"}'),
        StepRecord(index=1, model_id=0, worker="b", subtask="s", access=[], response="\\boxed{6}"),
    ]
    answers = step_answers(steps)
    assert answers == [StepAnswer(step=0, model_id=2, answer="5"), StepAnswer(step=1, model_id=0, answer="6")]
    prior = PriorRound(completion="c", final_response="\\boxed{6}", answers=answers)
    cards = [WorkerCard(index=i, description=f"w{i}") for i in range(3)]
    user = recursion_messages("Q?", cards, [prior], max_steps=3)[-1].content
    assert "Step 0 (Model 2): 5\nStep 1 (Model 0): 6\nThe steps gave different final answers." in user
    short = recursion_messages("Q?", cards, [prior], max_steps=3, response_chars=0)[-1].content
    assert "(not shown: see each step's final answer)" in short and "Step 1 (Model 0): 6" in short
    older = PriorRound(completion="c", final_response="r")  # written before schema 13: nothing added
    assert (
        "Final answer of each step" not in recursion_messages("Q?", cards, [older], max_steps=3)[-1].content
    )


def test_a_third_round_is_told_whether_the_latest_answer_matches_an_earlier_step() -> None:
    """With two earlier rounds, one line says whether the latest round's final answer is one an earlier round's step
    stated (the tie-breaker sided with one of them), none did, or it stated none; one earlier round: no line."""
    cards = [WorkerCard(index=i, description=f"w{i}") for i in range(4)]
    pair = PriorRound(
        completion="c1",
        final_response="\\boxed{8}",
        answers=[StepAnswer(step=0, model_id=1, answer="7"), StepAnswer(step=1, model_id=2, answer="8")],
    )

    def third(answer: str | None) -> str:
        tie = PriorRound(
            completion="c2", final_response="r", answers=[StepAnswer(step=0, model_id=3, answer=answer)]
        )
        return recursion_messages("Q?", cards, [pair, tie], max_steps=3)[-1].content

    assert "Across rounds: The latest round's final answer matches an earlier round's step." in third("7.0")
    assert "Across rounds: The latest round's final answer matches no earlier round's step." in third("9")
    assert "Across rounds: The latest round gave no final answer." in third(None)
    assert (
        third("7").index("### Round 2") < third("7").index("Across rounds") < third("7").index("You already")
    )
    assert "Across rounds" not in recursion_messages("Q?", cards, [pair], max_steps=3)[-1].content
    older = PriorRound(completion="c", final_response="r")  # before schema 13: no step answers, no line
    assert "Across rounds" not in recursion_messages("Q?", cards, [older, older], max_steps=3)[-1].content


def test_cue_lines_finds_what_findall_finds() -> None:
    """``cue_lines`` tries the cue pattern at line starts only; on texts built from the pieces that matter (cues
    across line breaks, Unicode case folds, carriage returns) it returns exactly ``findall``'s matches."""
    pieces = [
        "answer",
        "Answer",
        "ANSWER",
        "final",
        "Final answer",
        "the",
        " is",
        " ",
        "\n",
        "\n\n",
        ":",
        "：",
    ]
    pieces += ["*", "#", ">", "-", "x", "42", ".", "$", "\t", "anſwer", "The answer is 5", "\r\n", "é"]
    rng = random.Random(7)
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert finals.cue_lines(text) == finals._CUE_LINE.findall(text), repr(text)
