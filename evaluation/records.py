"""One finished eval item, and ``items.jsonl``: the run's memory, appended as each item finishes.

A run is resumable because nothing is kept only in memory: each ``ItemResult`` (the whole ``SolveResult``, so the
report can draw its workflows) is one JSON line, written when the item finishes. A rerun reads the file, skips
every key already done and retries only transient failures (a timeout, an unavailable service). The last line of
a run that was killed mid-write may be cut off; it is skipped (and that item runs again).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from conductor.policies import PolicyRecord
from schemas.errors import ErrorCode
from schemas.solve import SolveResult

Key = tuple[str, str, int, str]
"""(benchmark, strategy, repeat, item id)."""

TRANSIENT = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT})
"""Task errors a rerun retries: the infrastructure, not the strategy, failed."""


class ItemResult(msgspec.Struct, frozen=True, kw_only=True):
    benchmark: str
    strategy: str
    repeat: int
    item: str
    domain: str
    subject: str = ""
    question: str = ""
    outcome: str  # correct | incorrect | error (the verifier's infrastructure) | failed (no answer to score)
    reason: str = ""  # the verdict's reason, or the task error's message
    error_code: str | None = None
    retryable: bool = False  # a transient failure: not "done", a rerun tries it again
    result: SolveResult
    version: str = (
        ""  # the benchmark's task version (tasks/registry.py) it ran under; "" in items of older runs
    )
    # The configured Conductor that planned it (conductor/policies.py): for a strategy that runs the planner's own
    # policy (`conductor`), when the services ran here; None for baselines, running services and older runs.
    policy: PolicyRecord | None = None

    @property
    def key(self) -> Key:
        return (self.benchmark, self.strategy, self.repeat, self.item)

    @property
    def correct(self) -> bool:
        return self.outcome == "correct"

    @property
    def cost_usd(self) -> float:
        return self.result.usage.total.cost_usd

    @property
    def tokens(self) -> int:
        return self.result.usage.total.total_tokens

    @property
    def calls(self) -> int:
        return self.result.usage.total.calls

    @property
    def workflow_steps(self) -> list[int]:
        """Steps of each workflow the planner wrote (hand-back rounds, with none, left out)."""
        return [len(r.steps) for r in self.result.workflows if r.steps]

    @property
    def workers(self) -> list[str]:
        return [s.worker for r in self.result.workflows for s in r.steps]

    @property
    def escalated(self) -> bool:
        """A round after the first called a worker (the Conductor did not hand the first round's answer back)."""
        return any(r.steps for r in self.result.workflows[1:])

    @property
    def shape(self) -> str:
        """Its workflows in worker names, round by round: ``a + b → c``; a round that hands back is ``hand back``."""
        return " → ".join(" + ".join(s.worker for s in r.steps) or "hand back" for r in self.result.workflows)


def classify(result: SolveResult) -> tuple[str, str, str | None, bool]:
    """(outcome, reason, error code, retryable) of a finished task."""
    if result.verdict is not None:
        error = result.verdict.error
        return result.verdict.outcome.value, result.verdict.reason, error.code.value if error else None, False
    if result.error is not None:
        retryable = result.error.retryable or result.error.code in TRANSIENT
        return "failed", result.error.message, result.error.code.value, retryable
    return "failed", "no verdict: the task carried no reference", None, False


def finished(
    result: SolveResult,
    *,
    benchmark: str,
    strategy: str,
    repeat: int,
    item: str,
    domain: str,
    subject: str = "",
    question: str = "",
    version: str = "",
    policy: PolicyRecord | None = None,
) -> ItemResult:
    """The record of one finished task."""
    outcome, reason, code, retryable = classify(result)
    return ItemResult(
        benchmark=benchmark,
        strategy=strategy,
        repeat=repeat,
        item=item,
        domain=domain,
        subject=subject,
        question=question,
        outcome=outcome,
        reason=reason,
        error_code=code,
        retryable=retryable,
        result=result,
        version=version,
        policy=policy,
    )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ItemResult)


def append(path: Path, item: ItemResult) -> None:
    """One line per item, flushed at once: what is on disk is what a rerun skips."""
    with path.open("ab") as fh:
        fh.write(_encoder.encode(item) + b"\n")


def repair(path: Path) -> None:
    """End a line cut off by a killed run, so the next append starts a line of its own."""
    if path.is_file() and path.stat().st_size:
        with path.open("rb+") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                fh.write(b"\n")


def load(path: Path) -> dict[Key, ItemResult]:
    """The items already finished, by key (a later line for the same key wins); unreadable lines are skipped."""
    found: dict[Key, ItemResult] = {}
    if not path.is_file():
        return found
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            item = _decoder.decode(line)
        except msgspec.DecodeError:
            continue
        found[item.key] = item
    return found
