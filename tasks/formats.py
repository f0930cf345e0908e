r"""The answer-format instruction each benchmark's reference harness gives the model, added to its question.

Real models answer in the form the verifiers score only when asked (conductor/answer_format.py explains why the
verifier never guesses). The wording is reused, never restated: math and multiple choice use the sim family's
harness instructions (tasks/sim/draft.py: a boxed answer as in the MATH/AIME harnesses, an ``Answer: X`` line
as in simple-evals' GPQA/MMLU template), LiveCodeBench the sim code tasks' LiveCodeBench-style instructions
(tasks/sim/codegen.py), RLPR the ``general`` family's ``<answer>`` tags (RLPR's own harness asks for them).
Only BigCodeBench/HumanEval's instruct-style prompt is new here. A question that already asks for its family's
marker (``carries_format``) is left alone, so the executor's per-step instruction is never doubled either.
"""

from __future__ import annotations

import msgspec

from conductor.answer_format import DEFAULT_FORMATS, carries_format, family_of
from schemas.verify import FunctionalTestsReference, StdioTestsReference
from tasks.problem import Problem
from tasks.sim.codegen import FUNCTIONAL_FORMAT, STDIN_FORMAT
from tasks.sim.draft import MATH_FORMAT, MCQ_FORMAT

CODE_COMPLETE_FORMAT = "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
"""BigCodeBench's instruct prompt (also evalplus's for HumanEval): the code prompt follows in a fence."""

GENERAL_FORMAT = DEFAULT_FORMATS["general"].final


_WRITTEN = {"math": MATH_FORMAT, "mcq": MCQ_FORMAT, "general": GENERAL_FORMAT}
"""The instruction of each family whose answer is written, not run: one wording whatever the reference."""


def instruction(problem: Problem) -> str | None:
    """The harness instruction for ``problem``'s family; None when its question already asks for the marker."""
    family = family_of(problem.domain)
    if family is None or carries_format(family, problem.question):
        return None
    if family != "code":
        return _WRITTEN[family]
    match problem.reference:
        case StdioTestsReference():
            return STDIN_FORMAT
        case FunctionalTestsReference():
            return FUNCTIONAL_FORMAT
        case _:
            return CODE_COMPLETE_FORMAT


def as_presented(question: str, domain: str | None) -> str:
    """A question as the registry presents its family's questions: with the harness instruction when it asks for no
    marker (math, multiple choice, the ``general`` family). What a policy trained on registry questions was shown, so
    the planner shows a user's question so too (its card's ``questions = "harness"``). A code question is left as
    asked: its instruction depends on a test harness the question does not name."""
    family = family_of(domain)
    if family not in _WRITTEN or carries_format(family, question):
        return question
    return f"{question.rstrip()}\n\n{_WRITTEN[family]}"


def with_format(problem: Problem) -> Problem:
    """``problem`` with its harness instruction: after the question, or (code completion) before the fenced prompt."""
    text = instruction(problem)
    if text is None:
        return problem
    if text == CODE_COMPLETE_FORMAT:
        question = f"{text}\n```python\n{problem.question.rstrip()}\n```"
    else:
        question = f"{problem.question.rstrip()}\n\n{text}"
    return msgspec.structs.replace(problem, question=question)
