"""The verifier core: one VerifyRequest in, one Verdict out; batches spread over warm math and sandbox workers.

Three outcomes are kept apart everywhere: CORRECT, INCORRECT (including "no answer found") and ERROR (the verifier
itself failed: a worker died, our deadline fired, a library the task needs is missing). ERROR carries an ErrorInfo
so training masks the sample instead of teaching the policy a zero.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Iterable

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
from services.verifier.math_equiv import normalize_text
from services.verifier.pool import Launch, WorkerError, WorkerPool
from services.verifier.sandbox import launcher
from services.verifier.sandbox.client import LayerReport, Sandbox

log = logging.getLogger(__name__)
MAX_ANSWER_CHARS = 2000  # a boxed answer longer than this is not an answer; it would only feed slow parsing
MCQ_DOMAINS = {"mcq", "multiple_choice", "gpqa", "gpqa_diamond", "mmlu", "mmlu_pro"}


def _math_spawner(slot: int) -> Launch:
    return Launch(argv=[sys.executable, "-m", "services.verifier.math_worker"], cwd=str(launcher.repo_root()))


def is_mcq(ref: TextReference, domain: str | None) -> bool:
    if ref.kind != "auto":
        return ref.kind == "mcq"
    letter = mcq.gold_letter(ref.answer)
    return letter is not None and (bool(ref.choices) or (domain or "").lower() in MCQ_DOMAINS)


def error_verdict(
    req_id: str, code: ErrorCode, message: str, started: float, detail: str | None = None
) -> Verdict:
    return Verdict(
        id=req_id,
        outcome=Outcome.ERROR,
        reason=message,
        error=ErrorInfo(code=code, message=message, detail=detail, retryable=code != ErrorCode.BAD_REQUEST),
        duration_s=time.monotonic() - started,
    )


class Verifier:
    """Owns the worker pools; ``verify`` is safe to call concurrently from many tasks."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.math = WorkerPool("math", _math_spawner, settings.math_workers, settings.worker_start_timeout_s)
        self.sandbox = Sandbox(settings)
        self.concurrency = asyncio.Semaphore(2 * (settings.math_workers + settings.sandbox_workers))

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
        started = time.monotonic()
        if len(req.response) > self.settings.max_response_chars:
            return Verdict(
                id=req.id,
                outcome=Outcome.INCORRECT,
                duration_s=0.0,
                reason=f"response longer than {self.settings.max_response_chars} characters",
            )
        try:
            verdict = await self._dispatch(req, started)
        except WorkerError as exc:
            return error_verdict(req.id, ErrorCode.VERIFIER_ERROR, f"verifier worker failed: {exc}", started)
        except Exception as exc:  # a bug of ours must not look like a wrong answer: masked, logged, described
            log.exception("verifier crashed on request %s", req.id)
            return error_verdict(
                req.id, ErrorCode.INTERNAL, f"verifier bug: {type(exc).__name__}", started, str(exc)
            )
        return verdict

    async def _dispatch(self, req: VerifyRequest, started: float) -> Verdict:
        s = self.settings
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
        if ref.kind == "exact":
            ok = (
                normalize_text(last) == normalize_text(ref.answer)
                and len({normalize_text(a) for a in answers.items}) == 1
            )
            return done(ok, "exact match" if ok else "no exact match", last)
        if all(normalize_text(a) == normalize_text(ref.answer) for a in answers.items):
            return done(True, f"exact match ({answers.source})", last)
        request = {
            "answers": answers.items[-8:],
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
        async with self.concurrency:
            return await self.verify(req)

    async def stream(self, requests: Iterable[VerifyRequest]) -> AsyncIterator[Verdict]:
        """Verdicts as they complete (not in request order); every request yields exactly one verdict."""
        tasks = [asyncio.ensure_future(self._bounded(r)) for r in requests]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for task in tasks:
                task.cancel()

    async def verify_batch(self, requests: list[VerifyRequest]) -> list[Verdict]:
        """Verdicts in request order."""
        return list(await asyncio.gather(*(self._bounded(r) for r in requests)))
