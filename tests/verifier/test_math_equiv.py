"""Math equivalence in-process (pytest's main thread, so math-verify's alarms work): accepts and, as important, rejects."""

from __future__ import annotations

import pytest

from services.verifier.math_equiv import equivalent, grade, plain_number
from tasks.answers import normalize_text

ACCEPT = [
    ("0.5", r"\frac{1}{2}", "", None),
    (r"\frac{\pi}{3}", r"60^\circ", "Find the angle in radians.", None),
    ("120", r"\frac{2\pi}{3}", "In degrees, what is the interior angle?", None),
    (r"(-\infty,3)", "x<3", "Express the solution in interval notation.", None),
    ("[2,5]", r"2 \le x \le 5", "Give the solution set as an interval.", None),
    ("86400", "86,400", "", None),
    ("86400", "86{,}400", "", None),
    ("9", r"9\text{ cm}^2", "", None),
    ("3.5", r"\$3.50", "", None),
    (r"\text{(C)}", "C", "", None),
    ("33", "033", "", "aime"),
    (r"\text{Tuesday}", "tuesday", "", None),
]
REJECT = [
    (r"\frac{\pi}{3}", "60", "Find the angle in radians.", None),  # no unit: 60 is not pi/3
    ("30", r"\frac{\pi}{6}", "What is 5 times 6?", None),  # not about angles: no conversion
    ("(1,2)", "1<x<2", "Find the ordered pair.", None),  # a point, not an interval
    (r"(-\infty,3)", r"x\le 3", "Express in interval notation.", None),
    ("86400", "86,500", "", None),
    ("6", r"9\text{ cm}^2", "", None),
    (r"\text{(C)}", "D", "", None),
    ("33", "33.0", "", "aime"),
    ("33", "33/1", "", "aime"),
    ("2", "3", "", None),
    ("1.5", "1.50001", "", None),
]


@pytest.mark.parametrize(("gold", "pred", "question", "domain"), ACCEPT)
def test_accepts(gold: str, pred: str, question: str, domain: str | None) -> None:
    verdict = equivalent(gold, pred, question, domain)
    assert verdict.correct, verdict.reason


@pytest.mark.parametrize(("gold", "pred", "question", "domain"), REJECT)
def test_rejects(gold: str, pred: str, question: str, domain: str | None) -> None:
    verdict = equivalent(gold, pred, question, domain)
    assert not verdict.correct, verdict.reason


def test_several_different_final_answers_are_wrong() -> None:
    assert not grade(["3", "4"], "4", "", None, 5).correct
    assert grade([r"\frac12", "0.5"], "0.5", "", None, 5).correct  # restating the same answer is fine
    assert grade([], "1", "", None, 5).reason == "no final answer found"
    assert not grade(["1", "2", "3", "4", "4"], "4", "", None, 5).correct


def test_helpers() -> None:
    assert normalize_text(r"\left( \dfrac{1}{2} \right).") == normalize_text(r"(\frac{1}{2})")
    assert plain_number(r"1\,000 \text{ m}") == "1000"
    assert plain_number("2x") is None


# Issue 9 item 1: two *different exact* values of very small or very large magnitude were accepted because the
# comparison fell back to a float tolerance. Each pair is checked in both directions.
CLOSE_EXACT = [
    (r"\frac{1}{3^{40}}", r"\frac{1}{3^{41}}"),
    (r"\frac{1}{50!}", r"\frac{1}{52!}"),
    (r"10^{30}+1", r"10^{30}"),
    (r"10^{-20}", r"2\cdot 10^{-20}"),
    (r"\frac{1}{2^{60}}", r"\frac{1}{2^{61}}"),
    (r"2^{-70}", "0"),
    (r"\frac{1}{10^{12}}", r"\frac{1}{10^{12}+1}"),
    (r"\sqrt{2}\cdot 10^{-15}", r"\sqrt{3}\cdot 10^{-15}"),
    (r"e^{-50}", r"e^{-51}"),
    (r"\frac{1}{3^{40}}", "0.0000000001"),  # a written decimal far beyond its own precision
]
EXACT_EQUIVALENCES = [
    (r"\frac{1}{3^{40}}", r"3^{-40}"),
    (r"\frac{1}{50!}", r"\frac{51\cdot 52}{52!}"),
    (r"10^{30}+1", r"1000000000000000000000000000001"),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"),
    (r"2^{-70}", r"\frac{1}{1180591620717411303424}"),
    (r"\frac{1}{3}", "0.3333333"),  # a decimal approximation within the digits it writes
    (r"\frac{1}{2^{10}}", "0.0009765625"),
    (r"\frac{1}{3^{40}}", r"8.2\times 10^{-20}"),  # scientific notation: 2 significant digits, both right
]


@pytest.mark.parametrize(("a", "b"), CLOSE_EXACT)
def test_close_but_different_values_are_not_equivalent(a: str, b: str) -> None:
    assert not equivalent(a, b).correct, f"{a} accepted for {b}"
    assert not equivalent(b, a).correct, f"{b} accepted for {a}"


@pytest.mark.parametrize(("a", "b"), EXACT_EQUIVALENCES)
def test_true_equivalences_of_extreme_magnitude_still_pass(a: str, b: str) -> None:
    assert equivalent(a, b).correct, equivalent(a, b).reason
    assert equivalent(b, a).correct, equivalent(b, a).reason
