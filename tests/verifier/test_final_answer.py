"""One final answer, whatever the marker (issue 9 item 2): a box, an ``<answer>`` tag and a "Final answer:" line
all state the answer; two different answers across any of them are wrong, in math and in multiple choice, while
the same answer stated twice (in two forms) stays one answer."""

from __future__ import annotations

import pytest

from services.verifier.extract import final_answers
from services.verifier.math_equiv import grade
from services.verifier.mcq import grade as grade_mcq

MIXED_MATH = [
    r"So \boxed{156}. Final answer: 157",
    "Final answer: 157\nOn reflection, \\boxed{156}",
    r"<answer>157</answer> and so \boxed{156}",
    r"\boxed{156} <answer>157</answer>",
    "<answer>157</answer>\nFinal answer: 156",
    "Final answer: 157\nFinal answer: 156",
]
SAME_MATH = [
    r"The final answer is $\boxed{156}$.",
    r"\boxed{156}. Final answer: 156",
    r"<answer>\boxed{156}</answer>",
    r"<answer>156</answer> Final answer: $156$.",
    r"\boxed{\frac{312}{2}} so the final answer: 156",
]


@pytest.mark.parametrize("response", MIXED_MATH)
def test_two_different_math_answers_under_different_markers_are_wrong(response: str) -> None:
    items = final_answers(response).items
    assert {"156", "157"} <= set(items), items
    verdict = grade(items, "156", "", None, 5)
    assert not verdict.correct and "several" in verdict.reason, verdict


@pytest.mark.parametrize("response", SAME_MATH)
def test_one_answer_stated_in_two_forms_is_one_answer(response: str) -> None:
    verdict = grade(final_answers(response).items, "156", "", None, 5)
    assert verdict.correct, (response, verdict)


@pytest.mark.parametrize(
    "response",
    [
        r"\boxed{B}. Final answer: C",
        r"<answer>C</answer> \boxed{B}",
        "The answer is B.\n<answer>C</answer>",
        r"Answer: C \boxed{B}",
        r"\boxed{C} Final answer: (B)",
    ],
)
def test_two_different_letters_under_different_markers_are_wrong(response: str) -> None:
    ok, reason, _ = grade_mcq(response, "C", 4)
    assert not ok and "several" in reason, reason


@pytest.mark.parametrize(
    "response",
    [r"\boxed{C}. Final answer: C", r"<answer>(C)</answer> so the answer is C", r"Answer: \boxed{C}"],
)
def test_the_same_letter_under_several_markers_is_one_answer(response: str) -> None:
    ok, reason, letter = grade_mcq(response, "C", 4)
    assert ok and letter == "C", reason
