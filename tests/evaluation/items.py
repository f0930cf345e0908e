"""Hand-built finished items for the table and report tests: known numbers in, known figures out."""

from __future__ import annotations

from evaluation import records
from evaluation.records import ItemResult
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import RoundRecord, SolveResult, StepRecord
from schemas.usage import Usage, UsageSummary
from schemas.verify import Outcome, Verdict


def item(
    strategy: str,
    benchmark: str,
    repeat: int,
    n: int,
    correct: bool,
    *,
    workers: tuple[str, ...] = ("w0",),
    cost: float = 0.01,
    tokens: int = 100,
    error: ErrorCode | None = None,
    response: str = "answer",
) -> ItemResult:
    steps = [
        StepRecord(
            index=i,
            model_id=0,
            worker=w,
            subtask=f"do part {i}",
            access="all" if i else [],
            response=response,
            usage=Usage(input_tokens=tokens // 2, output_tokens=tokens // 2),
        )
        for i, w in enumerate(workers)
    ]
    total = Usage(
        input_tokens=tokens // 2, output_tokens=tokens - tokens // 2, cost_usd=cost, calls=len(steps)
    )
    if error is not None:
        info = ErrorInfo(
            code=error, message=f"{error.value} after 3 tries", retryable=error == ErrorCode.TIMEOUT
        )
        result = SolveResult(task_id=f"t{n}", error=info, usage=UsageSummary(total=total))
    else:
        outcome = Outcome.CORRECT if correct else Outcome.INCORRECT
        verdict = Verdict(
            id=f"t{n}", outcome=outcome, reason="math equivalence" if correct else "wrong answer 7"
        )
        result = SolveResult(
            task_id=f"t{n}",
            answer=response,
            verdict=verdict,
            usage=UsageSummary(total=total),
            workflows=[RoundRecord(round=0, policy="moa:4", reasoning="plan <b>", steps=steps)],
        )
    return records.finished(
        result,
        benchmark=benchmark,
        strategy=strategy,
        repeat=repeat,
        item=f"q{n}",
        domain="math",
        question=f"question {n}?",
    )


def grid(strategy: str, benchmark: str, per_repeat: list[list[bool]], **kwargs: object) -> list[ItemResult]:
    """Items whose correctness per repeat is ``per_repeat[r]``."""
    return [
        item(strategy, benchmark, r, n, ok, **kwargs)  # type: ignore[arg-type]
        for r, row in enumerate(per_repeat)
        for n, ok in enumerate(row)
    ]
