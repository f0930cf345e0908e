"""Real benchmark records, not fixtures written here (issue 20, item 5): MATH-500 as released.

``evaluation/fixtures/math500_real.jsonl.gz`` is MATH-500 (the 500 MATH test problems of "Let's Verify Step by Step",
openai/prm800k) as republished at MobileLLM/BudgetThinker, evaluation/data/math500/test_ori.jsonl, commit
f0466b9d37595f46603387baa5930e312fefb7f5 (problem, solution, answer, subject, level, unique_id); MATH is MIT-licensed.
Its real answer formats (``\\left( 3, \\frac{\\pi}{2} \\right)``, ``\\text{Evelyn}``, ``90^\\circ``, ``6 - 5i``, ``p - q``)
and solutions that say "the final answer is $5 + 4 + 2 = \\boxed{11}$" are what a verifier meets in the eval. Before
this test, three of the 500 reference solutions were judged wrong ("several different final answers").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evaluation.datasets import load_math500, read_rows
from schemas.verify import Outcome, VerifyRequest
from services.verifier.core import Verifier

pytestmark = pytest.mark.asyncio(loop_scope="session")

MATH500 = Path(__file__).parents[2] / "evaluation" / "fixtures" / "math500_real.jsonl.gz"


def _plain(answer: str) -> str:
    return re.sub(r"^\s*[a-z]\s*=\s*", "", answer.replace(" ", ""))


async def test_every_math500_reference_solution_is_judged_correct_and_other_answers_are_not(
    verifier: Verifier,
) -> None:
    problems = load_math500(MATH500)  # the loader's own check: each answer is its solution's last box
    rows = list(read_rows(MATH500))
    assert len(problems) == 500
    gold = [
        VerifyRequest(id=p.id, response=row["solution"], reference=p.reference)
        for p, row in zip(problems, rows, strict=True)
    ]
    wrong = []
    for i, problem in enumerate(problems):
        j = (i + 1) % len(problems)  # the next record whose answer is a different one ("5" and "x=5" are not)
        while _plain(problems[j].reference.answer) == _plain(problem.reference.answer):
            j = (j + 1) % len(problems)
        other = problems[j].reference.answer
        wrong.append(
            VerifyRequest(
                id=f"wrong|{problem.id}",
                response=f"So the answer is $\\boxed{{{other}}}$.",
                reference=problem.reference,
            )
        )
    verdicts = await verifier.verify_batch(gold + wrong)
    missed = {v.id: v.reason for v in verdicts[:500] if v.outcome is not Outcome.CORRECT}
    assert not missed, missed
    accepted = {v.id: v.reason for v in verdicts[500:] if v.outcome is Outcome.CORRECT}
    assert not accepted, accepted
