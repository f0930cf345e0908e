"""A pool worker as the conductor: the same Conductor prompt sent to one of the pool's own workers through the
worker-adapter (docs/method.md §7: a frontier model conducting with the same prompt does worse than the trained 7B,
because it leans on its prior beliefs about the workers). Selected per request with ``policy="worker:<name>"``.

The call goes through the worker-adapter like any step, so the worker's retries, limits, price and cache apply, and
its usage is the plan's usage. The completion is parsed, resampled and fallen back exactly like a model policy's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from schemas.errors import ErrorCode
from schemas.learner import PolicyCard
from schemas.work import ChatMessage, WorkReply, WorkRequest
from services.planner.policy import PolicyError, Sample

WORKER_PREFIX = "worker:"
"""``PlanRequest.policy`` prefix naming the pool worker that writes the workflow."""

Call = Callable[[WorkRequest], Awaitable[WorkReply]]


class WorkerPolicy:
    """``call`` sends one ``WorkRequest`` to the worker-adapter (a NATS request in the service, a fake in tests)."""

    def __init__(self, worker: str, call: Call) -> None:
        self.name = WORKER_PREFIX + worker
        # A pool worker was not trained to plan: it gets the full prompt, sampled as the settings say.
        self.card: PolicyCard | None = None
        self.worker = worker
        self._call = call

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        samples = []
        for _ in range(n):
            req = WorkRequest(
                worker=self.worker, messages=list(messages), max_tokens=max_tokens, temperature=temperature
            )
            samples.append(_sample(await self._call(req)))
        return samples

    async def aclose(self) -> None:
        return None


def _sample(reply: WorkReply) -> Sample:
    """A worker-adapter error becomes a ``PolicyError``; an unknown worker is the request's fault (``field``)."""
    if reply.error is not None:
        unknown = reply.error.code == ErrorCode.BAD_REQUEST and reply.error.field == "worker"
        raise PolicyError(
            f"worker {reply.worker!r} as conductor: {reply.error.message}",
            retryable=reply.error.retryable,
            detail=reply.error.detail,
            field="policy" if unknown else None,
        )
    return Sample(text=reply.text, usage=reply.usage)
