"""One generated sim task before it becomes a ``Problem``: the text, the reference, and the wrong answers workers give.

Generators (``mathgen``, ``mcqgen``, ``codegen``) return ``Draft``s; ``family`` turns them into the two views the
rest of the project needs — ``Problem``s for the eval runner and the learner, and the sim workers' dataset records
``{id, domain, question, answer, wrong[]}`` (services/worker_adapter/providers/sim.py) — so both come from one
source and can never disagree.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import msgspec

from schemas.verify import Reference

MATH_FORMAT = "Reason step by step, then put your final answer within \\boxed{}."
"""The answer-format instruction MATH/AIME harnesses give (a boxed final answer), so real models answer scorably."""

MCQ_FORMAT = "Reason step by step, then end with a line of the form 'Answer: X' where X is one of A, B, C, D."
"""The multiple-choice instruction (simple-evals / GPQA style: a final ``Answer: LETTER`` line)."""


class Draft(msgspec.Struct, frozen=True, kw_only=True):
    key: str  # unique within its generator, e.g. "modpow/3/100/7"; the task id is "sim/<domain>/<key>"
    domain: str  # "math" | "mcq" | "code": the sim workers' skill key and output format
    subject: str  # the generator's name: lets reports break accuracy down finer than domain
    question: str  # the full text a solver sees, answer-format instruction included
    answer: str  # what a correct worker writes: the math answer, the gold letter, or a correct program
    wrong: list[str]  # what wrong workers write: each must be scored incorrect by the real verifier
    reference: Reference


Generator = Callable[[random.Random], Iterator[Draft]]


def distinct_wrong(answer: str, candidates: list[object], k: int = 3) -> list[str]:
    """Up to ``k`` distinct wrong answers, in order, none equal to the answer (compared as text)."""
    out: list[str] = []
    for c in candidates:
        text = str(c)
        if text != answer and text not in out:
            out.append(text)
        if len(out) == k:
            break
    return out
