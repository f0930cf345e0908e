"""Generated math questions with exact integer or fraction answers, and the wrong answers of typical slips.

Each generator draws its parameters from the family's seeded ``random.Random`` and states the question in plain
text; the wrong answers are the results of a specific mistake (forgetting inclusion-exclusion, an off-by-one term,
permutations for combinations), so a wrong worker writes something a careless solver would, and the math verifier
must tell them apart.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from fractions import Fraction

from schemas.verify import TextReference
from tasks.sim.draft import MATH_FORMAT, Draft, distinct_wrong

PER_GENERATOR = 140


def _draft(key: str, subject: str, text: str, answer: object, wrong: list[object]) -> Draft | None:
    answer_text = str(answer)
    mistakes = distinct_wrong(answer_text, wrong)
    if len(mistakes) < 2:
        return None
    return Draft(
        key=f"{subject}/{key}",
        domain="math",
        subject=subject,
        question=f"{text}\n\n{MATH_FORMAT}",
        answer=answer_text,
        wrong=mistakes,
        reference=TextReference(answer=answer_text, kind="math"),
    )


def _unique(rng: random.Random, draw, limit: int = PER_GENERATOR) -> Iterator[tuple]:
    """Distinct parameter tuples from ``draw(rng)``; gives up quietly when the space is smaller than ``limit``."""
    seen: set[tuple] = set()
    for _ in range(limit * 20):
        params = draw(rng)
        if params not in seen:
            seen.add(params)
            yield params
            if len(seen) == limit:
                return


def modpow(rng: random.Random) -> Iterator[Draft]:
    for a, k, m in _unique(rng, lambda r: (r.randint(2, 19), r.randint(20, 400), r.randint(5, 23))):
        ans = pow(a, k, m)
        text = f"What is the remainder when {a}^{{{k}}} is divided by {m}?"
        wrong = [pow(a, k - 1, m), (ans + 1) % m, pow(a, k + 1, m), (ans - 1) % m, m - ans]
        if d := _draft(f"{a}/{k}/{m}", "modpow", f"{text}", ans, wrong):
            yield d


def divisor_sum(rng: random.Random) -> Iterator[Draft]:
    for (n,) in _unique(rng, lambda r: (r.randint(12, 2000),)):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        ans = sum(divs)
        text = f"Find the sum of all positive divisors of {n}."
        if d := _draft(str(n), "divisor_sum", text, ans, [ans - n, ans - 1, len(divs), ans + n]):
            yield d


def linear(rng: random.Random) -> Iterator[Draft]:
    def draw(r: random.Random) -> tuple:
        return (
            r.choice([i for i in range(-12, 13) if i not in (0, 1)]),
            r.randint(-60, 60),
            r.randint(-30, 30),
        )

    for a, b, x in _unique(rng, draw):
        c = a * x + b
        sign = "+" if b >= 0 else "-"
        text = f"Solve for x: {a}x {sign} {abs(b)} = {c}."
        wrong = [Fraction(c + b, a), -x, x + 1, Fraction(c, a), x - 1]
        wrong = [_frac(w) for w in wrong]
        if d := _draft(f"{a}/{b}/{x}", "linear", text, x, wrong):
            yield d


def lcm(rng: random.Random) -> Iterator[Draft]:
    for a, b in _unique(rng, lambda r: tuple(sorted((r.randint(4, 90), r.randint(4, 90))))):
        if a == b:
            continue
        ans = math.lcm(a, b)
        text = f"What is the least common multiple of {a} and {b}?"
        if d := _draft(f"{a}/{b}", "lcm", text, ans, [a * b, math.gcd(a, b), ans + a, 2 * ans]):
            yield d


def count_divisible(rng: random.Random) -> Iterator[Draft]:
    def draw(r: random.Random) -> tuple:
        a, b = sorted(r.sample(range(2, 14), 2))
        return (r.randint(100, 5000), a, b)

    for n, a, b in _unique(rng, draw):
        both = n // math.lcm(a, b)
        ans = n // a + n // b - both
        text = f"How many integers from 1 to {n} inclusive are divisible by {a} or by {b}?"
        wrong = [n // a + n // b, ans + 1, n // a + n // b - n // (a * b), ans - 1]
        if d := _draft(f"{n}/{a}/{b}", "count_divisible", text, ans, wrong):
            yield d


def series(rng: random.Random) -> Iterator[Draft]:
    for a, step, n in _unique(rng, lambda r: (r.randint(-20, 40), r.randint(2, 15), r.randint(8, 80))):
        ans = n * (2 * a + (n - 1) * step) // 2
        text = (
            f"What is the sum of the first {n} terms of the arithmetic sequence "
            f"{a}, {a + step}, {a + 2 * step}, ...?"
        )
        wrong = [ans - (a + (n - 1) * step), ans + a + n * step, n * (a + n * step) // 2, ans + step]
        if d := _draft(f"{a}/{step}/{n}", "series", text, ans, wrong):
            yield d


def choose(rng: random.Random) -> Iterator[Draft]:
    for n, k in _unique(rng, lambda r: (r.randint(6, 30), r.randint(2, 6))):
        if k >= n:
            continue
        ans = math.comb(n, k)
        text = f"In how many ways can a committee of {k} people be chosen from a group of {n} people?"
        wrong = [math.perm(n, k), math.comb(n, k - 1), math.comb(n - 1, k), n * k]
        if d := _draft(f"{n}/{k}", "choose", text, ans, wrong):
            yield d


def fraction_sum(rng: random.Random) -> Iterator[Draft]:
    def draw(r: random.Random) -> tuple:
        return (r.randint(1, 9), r.randint(2, 12), r.randint(1, 9), r.randint(2, 12))

    for a, b, c, d_ in _unique(rng, draw):
        total = Fraction(a, b) + Fraction(c, d_)
        if total.denominator == 1:
            continue
        text = f"Compute {a}/{b} + {c}/{d_}. Give the answer as a fraction in lowest terms."
        wrong = [Fraction(a + c, b + d_), total + 1, Fraction(a * c, b * d_), Fraction(a + c, b * d_)]
        if d := _draft(f"{a}/{b}/{c}/{d_}", "fraction_sum", text, _frac(total), [_frac(w) for w in wrong]):
            yield d


def _frac(value: Fraction | int) -> str:
    """LaTeX for an exact rational, as a MATH answer would be written (``\\frac{p}{q}``, ``-\\frac{p}{q}``)."""
    f = Fraction(value)
    if f.denominator == 1:
        return str(f.numerator)
    sign = "-" if f < 0 else ""
    return f"{sign}\\frac{{{abs(f.numerator)}}}{{{f.denominator}}}"


GENERATORS = (modpow, divisor_sum, linear, lcm, count_divisible, series, choose, fraction_sum)
