"""Planners that need no model: the paper's baselines (docs/method.md §7) and the planner's fallbacks.

Each writes a ``Workflow`` plus its rendered completion (``render_completion``), so results, recursion prompts and
the executor treat a baseline exactly like a Conductor. Workers are ordinals into the request's pool.

Spec grammar (``CONDUCTOR_PLANNER_FALLBACK``, ``PlanRequest.policy``, ``baseline:<spec>``)::

    single[:W]         worker W (default 0) answers alone                                  1 step
    moa[:K][@A]        K proposers (default 7, cycling over the pool), access []; then aggregator A (default 0)
                       with "all". The paper's MoA is one proposer layer + aggregator: 8 calls (docs/method.md §7).
                       K is capped at max_steps - 1 (a request asking for `moa` by name through conductor/strategy.py
                       gets max_steps = K + 1); with max_steps = 1 MoA is ``single:A``.
    refine[:N][@W]     self-refinement: W answers, then revises N - 1 times with "all" access     N steps
                       (default N = max_steps; the paper's self-reflection revises up to 5 times)
    consensus[:N][@W]  N independent samples of W (access []), then W itself reads them ("all") and states the
                       majority answer. The vote is done by the worker, an LLM, not by code: answers are free
                       text and "the same answer" needs judgement. N defaults to 5 (docs/method.md §7) and is capped
                       at max_steps - 1.

On a recursion round a baseline hands the previous answer back (three empty lists): re-running a fixed strategy
would only re-sample what the first round already did.
"""

from __future__ import annotations

import functools
import re
from typing import Literal

import msgspec

from conductor.strategy import CONSENSUS_SAMPLES, MOA_PROPOSERS
from conductor.workflow import build_workflow, render_completion
from schemas.plan import Access, Workflow

Kind = Literal["single", "moa", "refine", "consensus"]
KINDS: tuple[Kind, ...] = ("single", "moa", "refine", "consensus")


ANSWER = (
    "Answer the question. Reason step by step, then state the final answer clearly at the end in the form the "
    "question asks for."
)
PROPOSE = (
    "Answer the question independently. Reason step by step, then state your final answer clearly at the end."
)
AGGREGATE = (
    "Above are several independent responses to the question. Evaluate them critically: some may be wrong. "
    "Combine what is correct into one accurate, complete answer and state the final answer clearly at the end in "
    "the form the question asks for."
)
REVISE = (
    "Review the previous answer critically. Check each step for errors and for anything the question asks that it "
    "missed. Correct what is wrong, then give the complete final answer clearly at the end."
)
VOTE = (
    "Above are several independent answers to the question. Determine which final answer most of them agree on "
    "(the majority answer; if there is no majority, the best-supported one). Reply with that answer, stated "
    "clearly at the end in the form the question asks for."
)


class BaselineError(ValueError):
    """A spec that does not parse, or names a worker outside the request's pool."""


class BaselineSpec(msgspec.Struct, frozen=True, kw_only=True):
    kind: Kind
    count: int | None = None  # moa: proposers; refine: steps; consensus: samples
    worker: int | None = None  # single: the worker; moa: the aggregator; refine/consensus: the worker

    @property
    def name(self) -> str:
        """The canonical spec string, reported as ``PlanReply.policy``."""
        if self.kind == "single":
            return f"single:{self.worker or 0}"
        count = "" if self.count is None else f":{self.count}"
        worker = "" if self.worker is None else f"@{self.worker}"
        return f"{self.kind}{count}{worker}"


_SPEC = re.compile(r"(?P<kind>[a-z]+)(?::(?P<count>\d{1,3}))?(?:@(?P<worker>\d{1,3}))?")


@functools.lru_cache(maxsize=1024)
def parse_baseline(spec: str) -> BaselineSpec:
    """The spec a string names (module docstring); remembered per string, as requests name a few again and again
    (a ``BaselineSpec`` is immutable). A spec that does not parse raises ``BaselineError`` every time."""
    m = _SPEC.fullmatch(spec.strip())
    if m is None or m.group("kind") not in KINDS:
        raise BaselineError(
            f"unknown baseline {spec!r}; expected one of {', '.join(KINDS)} (e.g. moa, single:2)"
        )
    kind: Kind = m.group("kind")  # type: ignore[assignment]
    count = int(m.group("count")) if m.group("count") else None
    worker = int(m.group("worker")) if m.group("worker") else None
    if kind == "single":
        if count is not None and worker is not None:
            raise BaselineError(f"{spec!r}: single takes one worker, as single:W or single@W")
        return BaselineSpec(kind=kind, worker=count if count is not None else worker)
    if count is not None and count < 1:
        raise BaselineError(f"{spec!r}: the count must be at least 1")
    return BaselineSpec(kind=kind, count=count, worker=worker)


class BaselinePlan(msgspec.Struct, frozen=True, kw_only=True):
    reasoning: str
    workflow: Workflow
    completion: str


def plan_baseline(spec: BaselineSpec, *, n_workers: int, max_steps: int) -> BaselinePlan:
    """The baseline's workflow for a pool of ``n_workers`` under ``max_steps``. A pure function of its arguments,
    built and rendered once for each (the planner's per-request path); each call gets lists of its own."""
    plan = _plan_baseline(spec, n_workers, max_steps)
    wf = plan.workflow
    access = [a if isinstance(a, str) else list(a) for a in wf.access_list]
    workflow = Workflow(model_id=list(wf.model_id), subtasks=list(wf.subtasks), access_list=access)
    return BaselinePlan(reasoning=plan.reasoning, workflow=workflow, completion=plan.completion)


@functools.lru_cache(maxsize=1024)
def _plan_baseline(spec: BaselineSpec, n_workers: int, max_steps: int) -> BaselinePlan:
    worker = spec.worker or 0
    if not 0 <= worker < n_workers:
        raise BaselineError(f"{spec.name}: worker {worker} is outside the pool (0..{n_workers - 1})")
    match spec.kind:
        case "single":
            reasoning, steps = _single(worker)
        case "moa":
            reasoning, steps = _moa(spec.count or MOA_PROPOSERS, worker, n_workers, max_steps)
        case "refine":
            reasoning, steps = _refine(min(spec.count or max_steps, max_steps), worker)
        case "consensus":
            reasoning, steps = _consensus(min(spec.count or CONSENSUS_SAMPLES, max_steps - 1), worker)
    reasoning = f"Baseline {spec.name}: {reasoning}"
    workflow = build_workflow(
        [m for m, _, _ in steps],
        [s for _, s, _ in steps],
        [a for _, _, a in steps],
        n_workers=n_workers,
        max_steps=max_steps,
    )
    return BaselinePlan(
        reasoning=reasoning, workflow=workflow, completion=render_completion(reasoning, workflow)
    )


def handback(spec_name: str) -> BaselinePlan:
    """A recursion round: keep the previous answer (see the module docstring)."""
    reasoning = f"Baseline {spec_name} does not recurse; the previous result is returned unchanged."
    empty = Workflow(model_id=[], subtasks=[], access_list=[])
    return BaselinePlan(reasoning=reasoning, workflow=empty, completion=render_completion(reasoning, empty))


Step = tuple[int, str, Access]


def _single(worker: int) -> tuple[str, list[Step]]:
    return f"Model {worker} answers alone.", [(worker, ANSWER, [])]


def _moa(proposers: int, aggregator: int, n_workers: int, max_steps: int) -> tuple[str, list[Step]]:
    k = min(proposers, max_steps - 1)
    if k < 1:
        return _single(aggregator)
    ids = [i % n_workers for i in range(k)]
    listed = ", ".join(str(i) for i in ids)
    return (
        f"Models {listed} answer independently; Model {aggregator} combines their answers.",
        [*((i, PROPOSE, []) for i in ids), (aggregator, AGGREGATE, "all")],
    )


def _refine(steps: int, worker: int) -> tuple[str, list[Step]]:
    return (
        f"Model {worker} answers, then revises its answer {steps - 1} time(s) seeing the history.",
        [(worker, ANSWER, []), *((worker, REVISE, "all") for _ in range(steps - 1))],
    )


def _consensus(samples: int, worker: int) -> tuple[str, list[Step]]:
    if samples < 1:
        return _single(worker)
    return (
        f"Model {worker} answers {samples} times independently, then picks the majority answer.",
        [*((worker, PROPOSE, []) for _ in range(samples)), (worker, VOTE, "all")],
    )
