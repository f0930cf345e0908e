"""``policy="worker:<name>"``: a pool worker writes the workflow from the Conductor's prompt (docs/method.md §7)."""

from __future__ import annotations

from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import WorkerCard
from schemas.usage import Usage
from schemas.work import WorkReply, WorkRequest
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.worker import WorkerPolicy
from tests.planner.samples import GOOD, request

USAGE = Usage(input_tokens=900, output_tokens=120, cost_usd=0.002, calls=1)


def planner(texts: list[str], sent: list[WorkRequest], **settings: object) -> Planner:
    """A planner whose worker-adapter is a list of replies; an unknown worker gets the adapter's bad_request."""

    async def call(req: WorkRequest) -> WorkReply:
        sent.append(req)
        if req.worker != "sim-frontier":
            info = ErrorInfo(
                code=ErrorCode.BAD_REQUEST, message=f"unknown worker {req.worker!r}", field="worker"
            )
            return WorkReply(worker=req.worker, error=info)
        return WorkReply(worker=req.worker, text=texts.pop(0), usage=USAGE)

    return Planner(PlannerSettings(**settings), None, worker_policy=lambda name: WorkerPolicy(name, call))  # type: ignore[arg-type]


async def test_the_worker_gets_the_conductor_prompt_and_its_usage_is_the_plans(
    cards: list[WorkerCard],
) -> None:
    sent: list[WorkRequest] = []
    reply = await planner([GOOD], sent).plan(request(cards, policy="worker:sim-frontier"))
    assert reply.error is None and reply.policy == "worker:sim-frontier" and not reply.fallback_used
    assert reply.workflow is not None and reply.workflow.model_id == [1, 3]
    assert reply.usage == USAGE
    [req] = sent
    assert req.messages[0].role == "system" and "What is 6 * 7?" in req.messages[-1].content
    assert req.max_tokens == 1024  # docs/method.md §1: the Conductor's completion cap


async def test_unparseable_answers_are_resampled_then_fall_back(cards: list[WorkerCard]) -> None:
    sent: list[WorkRequest] = []
    p = planner(["The answer is 42."] * 3, sent)
    reply = await p.plan(request(cards, policy="worker:sim-frontier"))
    assert reply.fallback_used and reply.policy == "moa" and len(reply.format_failures) == 3
    assert reply.usage == USAGE + USAGE + USAGE and len(sent) == 3


async def test_an_unknown_worker_is_a_bad_request_not_a_fallback(cards: list[WorkerCard]) -> None:
    reply = await planner([], []).plan(request(cards, policy="worker:gpt-9"))
    assert (
        reply.error is not None
        and reply.error.code == ErrorCode.BAD_REQUEST
        and reply.error.field == "policy"
    )
    assert "unknown worker 'gpt-9'" in reply.error.message


async def test_a_planner_that_cannot_reach_workers_says_so(cards: list[WorkerCard]) -> None:
    reply = await Planner(PlannerSettings(), None).plan(request(cards, policy="worker:sim-frontier"))
    assert (
        reply.error is not None and reply.error.field == "policy" and "worker:<name>" in reply.error.message
    )
