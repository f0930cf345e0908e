"""Multiple-choice letter extraction: stated answers only, never guesses; several letters are wrong."""

from __future__ import annotations

import pytest

from services.verifier.mcq import extract_choice, gold_letter, grade


@pytest.mark.parametrize(
    ("response", "letters"),
    [
        ("Answer: C", ["C"]),
        ("The answer is (C).", ["C"]),
        ("the correct option is C", ["C"]),
        ("**C**", ["C"]),
        ("Ａｎｓｗｅｒ：Ｃ", ["C"]),
        ("answer: c", ["C"]),
        ("（Ｄ）", ["D"]),
        (r"\boxed{B}", ["B"]),
        ("<answer>(b)</answer>", ["B"]),
        ("I think the answer is a bit unclear. Answer: B", ["B"]),
        ("Option A is wrong, so the answer is B.", ["B"]),
        ("The answer is A or C", ["A", "C"]),
        ("The answer is A. Actually, the answer is C.", ["A", "C"]),
        ("<answer>B, C</answer>", ["B", "C"]),
        ("I guess", []),
        ("So it is B", []),
        ("The answer is 42.", []),
        ("I Think It Is Unclear", []),
        ("A. First, consider the energy. " + "x" * 300, []),
        ("C) Paris", ["C"]),
        ("<think>Answer: A</think>Final answer: C", ["C"]),
    ],
)
def test_extract(response: str, letters: list[str]) -> None:
    assert extract_choice(response).letters == letters


def test_gold_letter_forms() -> None:
    assert gold_letter("C") == "C"
    assert gold_letter("(c)") == "C"
    assert gold_letter(r"\text{(B)}") == "B"
    assert gold_letter("42") is None
    assert gold_letter("A, B") is None


def test_grade_respects_number_of_options_and_hedging() -> None:
    assert grade("Answer: E", "A", 4)[0] is False
    assert grade("Answer: E", "E", 5)[0] is True
    ok, reason, _ = grade("Answer: A or B", "A", 4)
    assert not ok and "several" in reason
    assert grade("no idea", "A", 4) == (False, "no answer letter found", None)
