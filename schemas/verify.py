"""Verifier subject: score a final response against a reference (math, multiple choice, exact, code tests)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

import msgspec

from schemas.contract import RequestReply
from schemas.errors import ErrorInfo

VERIFY_SUBJECT = "conductor.verify"
"""Request/reply: ``VerifyBatch`` in, ``VerifyBatchResult`` out. Queue group ``verifier``."""


class TextReference(msgspec.Struct, frozen=True, kw_only=True, tag="text"):
    """A ground-truth answer checked by extraction + equivalence.

    ``kind="auto"`` picks multiple choice when the answer is a single letter A-J and ``choices`` is given or the
    domain says so, math equivalence otherwise.
    """

    answer: str
    kind: Literal["auto", "math", "mcq", "exact"] = "auto"
    choices: list[str] | None = None  # option texts in letter order, when known (for MCQ sanity checks)


class IOTest(msgspec.Struct, frozen=True, kw_only=True):
    """One test case: stdin/stdout text, or (functional) newline-separated JSON args and one JSON result."""

    input: str
    output: str


class StdioTestsReference(msgspec.Struct, frozen=True, kw_only=True, tag="stdio"):
    """LiveCodeBench-style stdin/stdout program tests; all must pass."""

    tests: list[IOTest]


class FunctionalTestsReference(msgspec.Struct, frozen=True, kw_only=True, tag="functional"):
    """LeetCode-style tests calling ``Solution().<func_name>(*args)``; all must pass."""

    func_name: str
    tests: list[IOTest]
    starter_code: str = ""


class HumanEvalReference(msgspec.Struct, frozen=True, kw_only=True, tag="humaneval"):
    """HumanEval: program = prompt + completion (or a full solution), then ``check(entry_point)``."""

    prompt: str
    test: str
    entry_point: str


class UnittestReference(msgspec.Struct, frozen=True, kw_only=True, tag="unittest"):
    """BigCodeBench: a ``unittest`` TestCases class run against the program; every test must pass."""

    test: str
    entry_point: str = "task_func"
    code_prompt: str = ""  # prepended when the response is a completion rather than a full solution
    libs: list[str] = []


Reference = (
    TextReference | StdioTestsReference | FunctionalTestsReference | HumanEvalReference | UnittestReference
)


class Outcome(StrEnum):
    """Three outcomes, never confused: an infrastructure error is masked in training, not scored as wrong."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    ERROR = "error"


class VerifyRequest(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    response: str
    reference: Reference
    question: str = ""  # context for equivalence rules that depend on the question (e.g. angles)
    domain: str | None = None


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    outcome: Outcome
    reason: str  # human-readable: extracted answer, failing test, timeout, sandbox kill, ...
    extracted: str | None = None
    passed: int | None = None  # code: tests passed / tests expected
    total: int | None = None
    error: ErrorInfo | None = None  # set when outcome is ERROR
    duration_s: float = 0.0


class VerifyBatch(msgspec.Struct, frozen=True, kw_only=True):
    items: list[VerifyRequest]


class VerifyBatchResult(msgspec.Struct, frozen=True, kw_only=True):
    verdicts: list[Verdict] = []
    error: ErrorInfo | None = None  # the whole batch was rejected (bad request)


VERIFY: RequestReply[VerifyBatch, VerifyBatchResult] = RequestReply(
    subject=VERIFY_SUBJECT,
    queue="verifier",
    title="verify",
    request=VerifyBatch,
    reply=VerifyBatchResult,
    description="Internal (executor -> verifier): final responses and their references in, one verdict per item "
    "in order (correct, incorrect, or error for an infrastructure fault); code runs in a sandbox.",
    error_reply=lambda info, _request: VerifyBatchResult(error=info),
)
