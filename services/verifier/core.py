"""The verifier core: one VerifyRequest in, one Verdict out; batches spread over warm math and sandbox workers.

Three outcomes are kept apart everywhere: CORRECT, INCORRECT (including "no answer found") and ERROR (the verifier
itself failed: a worker died, our deadline fired, a library the task needs is missing). ERROR carries an ErrorInfo
so training masks the sample instead of teaching the policy a zero.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator, Hashable, Iterable

import msgspec
import structlog

from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    Outcome,
    StdioTestsReference,
    TextReference,
    UnittestReference,
    Verdict,
    VerifyRequest,
)
from services.verifier import codecheck, mcq
from services.verifier.config import Settings
from services.verifier.extract import final_answers, last_python_block
from services.verifier.fairness import REQUESTER, FairLimit
from services.verifier.processes import Launch, ProcessError, ProcessSet
from services.verifier.sandbox import launcher
from services.verifier.sandbox.client import LayerReport, Sandbox
from tasks import literal
from tasks.answers import LITERAL_DOMAIN, normalize_text

log = structlog.get_logger("conductor.verifier")
MAX_ANSWER_CHARS = 2000  # a boxed answer longer than this is not an answer; it would only feed slow parsing
MAX_DISTINCT_ANSWERS = (
    3  # more is hedging: wrong, and not worth one slow comparison per pair (as math_equiv.grade)
)
MCQ_DOMAINS = {"mcq", "multiple_choice", "gpqa", "gpqa_diamond", "mmlu", "mmlu_pro"}


def _math_spawner(slot: int) -> Launch:
    return Launch(argv=[sys.executable, "-m", "services.verifier.math_worker"], cwd=str(launcher.repo_root()))


def distinct_answers(items: list[str]) -> list[str]:
    """One representative per normalised form, ordered by last occurrence (so the final answer stays last): the
    math process compares every remaining pair, and none may be dropped unseen."""
    reps: dict[str, str] = {}
    for item in items:
        key = normalize_text(item)
        reps.pop(key, None)
        reps[key] = item
    return list(reps.values())


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(value: str | None) -> str | None:
    return value if value is None or not _SURROGATE.search(value) else _SURROGATE.sub("\ufffd", value)


def printable(v: Verdict) -> Verdict:
    """The verdict with every lone surrogate replaced by U+FFFD (a no-op copy-free path when there is none)."""
    fields = (v.id, v.reason, v.extracted) + (
        (v.error.message, v.error.detail, v.error.field) if v.error else ()
    )
    if not any(f and _SURROGATE.search(f) for f in fields):
        return v
    error = v.error and msgspec.structs.replace(
        v.error, message=_text(v.error.message), detail=_text(v.error.detail), field=_text(v.error.field)
    )
    return msgspec.structs.replace(
        v, id=_text(v.id), reason=_text(v.reason), extracted=_text(v.extracted), error=error
    )


def is_mcq(ref: TextReference, domain: str | None) -> bool:
    if ref.kind != "auto":
        return ref.kind == "mcq"
    letter = mcq.gold_letter(ref.answer)
    return letter is not None and (bool(ref.choices) or (domain or "").lower() in MCQ_DOMAINS)


def error_verdict(
    req_id: str,
    code: ErrorCode,
    message: str,
    started: float,
    detail: str | None = None,
    field: str | None = None,
) -> Verdict:
    return Verdict(
        id=req_id,
        outcome=Outcome.ERROR,
        reason=message,
        error=ErrorInfo(
            code=code, message=message, detail=detail, field=field, retryable=code != ErrorCode.BAD_REQUEST
        ),
        duration_s=time.monotonic() - started,
    )


class BatchTooLarge(ValueError):
    """A batch with more items than ``max_batch_items``: refused whole, as a bad request."""


class Verifier:
    """Owns the warm math and sandbox processes; ``verify`` is safe to call concurrently from many tasks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.math = ProcessSet("math", _math_spawner, settings.math_workers, settings.worker_start_timeout_s)
        self.sandbox = Sandbox(settings)
        self.concurrency = FairLimit(2 * (settings.math_workers + settings.sandbox_workers))

    async def start(self) -> LayerReport:
        await asyncio.gather(self.math.start(), self.sandbox.start())
        return self.sandbox.layers

    async def close(self) -> None:
        await asyncio.gather(self.math.close(), self.sandbox.close())

    async def __aenter__(self) -> Verifier:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- one request --------------------------------------------------------------------------------------------
    async def verify(self, req: VerifyRequest) -> Verdict:
        """One verdict, always encodable: candidate text (exception messages, answers) may hold lone surrogates,
        which no UTF-8 encoder accepts, so every text field is made printable here, at the one exit."""
        return printable(await self._verify_request(req))

    async def _verify_request(self, req: VerifyRequest) -> Verdict:
        started = time.monotonic()
        if len(req.response) > self.settings.max_response_chars:
            return Verdict(
                id=req.id,
                outcome=Outcome.INCORRECT,
                duration_s=0.0,
                reason=f"response longer than {self.settings.max_response_chars} characters",
            )
        with structlog.contextvars.bound_contextvars(task_id=req.id):
            return await self._verify(req, started)

    async def _verify(self, req: VerifyRequest, started: float) -> Verdict:
        try:
            verdict = await self._dispatch(req, started)
        except ProcessError as exc:
            return error_verdict(req.id, ErrorCode.VERIFIER_ERROR, f"verifier process failed: {exc}", started)
        except Exception as exc:  # a bug of ours must not look like a wrong answer: masked, logged, described
            log.exception("verifier crashed on a request")
            return error_verdict(
                req.id, ErrorCode.INTERNAL, f"verifier bug: {type(exc).__name__}", started, str(exc)
            )
        return verdict

    async def _dispatch(self, req: VerifyRequest, started: float) -> Verdict:
        s = self.settings
        tests = getattr(req.reference, "tests", None)
        if tests is not None and len(tests) > s.max_tests_per_item:
            message = f"{len(tests)} tests exceed the limit of {s.max_tests_per_item} per item"
            return error_verdict(req.id, ErrorCode.BAD_REQUEST, message, started, field="reference.tests")
        match req.reference:
            case TextReference() as ref:
                return await self._text(req, ref, started)
            case StdioTestsReference() as ref:
                result = await codecheck.check_stdio(
                    self.sandbox, last_python_block(req.response), ref, s.stdio_timeout_s
                )
            case FunctionalTestsReference() as ref:
                result = await codecheck.check_functional(
                    self.sandbox, last_python_block(req.response), ref, s.call_timeout_s
                )
            case HumanEvalReference() as ref:
                result = await codecheck.check_humaneval(
                    self.sandbox, last_python_block(req.response), ref, s.humaneval_timeout_s
                )
            case UnittestReference() as ref:
                result = await codecheck.check_unittest(
                    self.sandbox, last_python_block(req.response), ref, s.unittest_timeout_s
                )
        return Verdict(
            id=req.id,
            outcome=result.outcome,
            reason=result.reason,
            passed=result.passed,
            total=result.total,
            error=result.error,
            duration_s=time.monotonic() - started,
        )

    async def _text(self, req: VerifyRequest, ref: TextReference, started: float) -> Verdict:
        def done(correct: bool, reason: str, extracted: str | None) -> Verdict:
            return Verdict(
                id=req.id,
                outcome=Outcome.CORRECT if correct else Outcome.INCORRECT,
                reason=reason,
                extracted=extracted,
                duration_s=time.monotonic() - started,
            )

        if is_mcq(ref, req.domain):
            gold = mcq.gold_letter(ref.answer)
            if gold is None:
                return error_verdict(
                    req.id, ErrorCode.BAD_REQUEST, f"gold {ref.answer!r} is not a letter", started
                )
            correct, reason, letter = mcq.grade(req.response, gold, len(ref.choices) if ref.choices else None)
            return done(correct, reason, letter)
        answers = final_answers(req.response)
        last = answers.last
        if last is None:
            return done(
                False, "no final answer found (no \\boxed{}, <answer> tag or 'final answer:' line)", None
            )
        if len(last) > MAX_ANSWER_CHARS:
            return done(False, f"final answer longer than {MAX_ANSWER_CHARS} characters", last[:200])
        if (req.domain or "").lower() == LITERAL_DOMAIN:
            ok, reason = literal.grade(last, ref.answer)
            return done(ok, f"{reason} ({answers.source})", last)
        if ref.kind == "exact":
            ok = (
                normalize_text(last) == normalize_text(ref.answer)
                and len({normalize_text(a) for a in answers.items}) == 1
            )
            return done(ok, "exact match" if ok else "no exact match", last)
        if all(normalize_text(a) == normalize_text(ref.answer) for a in answers.items):
            return done(True, f"exact match ({answers.source})", last)
        distinct = distinct_answers(answers.items)
        if len(distinct) > MAX_DISTINCT_ANSWERS:
            return done(False, f"{len(distinct)} different final answers", last)
        request = {
            "answers": distinct,
            "gold": ref.answer,
            "question": req.question[-4000:],
            "domain": req.domain,
            "timeout": self.settings.math_verify_timeout_s,
        }
        reply = await self.math.call(request, self.settings.math_deadline_s)
        if "error" in reply:
            return error_verdict(
                req.id, ErrorCode.VERIFIER_ERROR, "math equivalence failed", started, reply["error"]
            )
        return done(reply["correct"], f"{reply['reason']} ({answers.source})", last)

    # ---- batches ------------------------------------------------------------------------------------------------
    async def _bounded(self, req: VerifyRequest) -> Verdict:
        async with self.concurrency.hold():
            return await self.verify(req)

    def _start(
        self, requests: list[VerifyRequest], requester: Hashable | None
    ) -> list[asyncio.Future[Verdict]]:
        """One task per request, all carrying the batch's requester (each batch is its own unless named), so
        admission and sandboxes are shared round-robin between batches rather than first come."""
        if len(requests) > self.settings.max_batch_items:
            raise BatchTooLarge(
                f"{len(requests)} items exceed the limit of {self.settings.max_batch_items} per batch"
            )
        token = REQUESTER.set(object() if requester is None else requester)
        try:
            return [asyncio.ensure_future(self._bounded(r)) for r in requests]
        finally:
            REQUESTER.reset(token)

    async def stream(
        self, requests: Iterable[VerifyRequest], requester: Hashable | None = None
    ) -> AsyncIterator[Verdict]:
        """Verdicts as they complete (not in request order); every request yields exactly one verdict."""
        tasks = self._start(list(requests), requester)
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for task in tasks:
                task.cancel()

    async def verify_batch(
        self, requests: list[VerifyRequest], requester: Hashable | None = None
    ) -> list[Verdict]:
        """Verdicts in request order."""
        tasks = self._start(requests, requester)
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
