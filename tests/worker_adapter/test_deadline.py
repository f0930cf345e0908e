"""The requester's deadline stops paid retries (issue 8, item 4): a retry that could only start after the
requester stopped waiting is not made."""

from __future__ import annotations

import asyncio
import time

from conductor.liveness import reset_deadline, set_deadline
from schemas.work import FaultReason, WorkRequest
from services.worker_adapter.provider import TransientProviderError
from tests.worker_adapter.test_core import HELLO, Scripted, _adapter


async def test_no_retry_starts_after_the_requesters_deadline():
    """Failed before: all 1 + max_retries tries were made (and paid) for a requester that had left."""
    provider = Scripted([TransientProviderError("5xx", reason=FaultReason.SERVER_ERROR)] * 10)
    adapter, _ = _adapter(provider, max_retries=8)
    token = set_deadline(
        time.time() + 0.4
    )  # backoff waits are >= 0.25 s, then 0.5 s, ...: a second retry won't fit
    try:
        reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    finally:
        reset_deadline(token)
    assert reply.error is not None and reply.error.retryable
    assert len(provider.calls) <= 2 and reply.attempts == len(provider.calls)


async def test_without_a_deadline_the_retries_are_as_configured():
    provider = Scripted([TransientProviderError("5xx", reason=FaultReason.SERVER_ERROR)] * 10)
    adapter, _ = _adapter(provider, max_retries=4)
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.attempts == 5 and len(provider.calls) == 5


async def test_a_call_waiting_for_a_slot_past_the_deadline_is_not_made():
    """Failed before (found by the chaos suite's overload run): a call that waited for the worker's concurrency
    slot until after its requester's deadline was still sent to the provider and paid."""
    provider = Scripted([], hold_s=0.5)
    adapter, _ = _adapter(provider, concurrency=1)
    first = asyncio.create_task(adapter.call(WorkRequest(worker="w", messages=HELLO)))
    await asyncio.sleep(0.05)  # the first call holds the only slot for 0.5 s
    token = set_deadline(time.time() + 0.2)
    try:
        late = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    finally:
        reset_deadline(token)
    assert (await first).error is None
    assert late.error is not None and not late.error.retryable and "deadline" in late.error.message
    assert len(provider.calls) == 1 and late.usage.calls == 0


async def test_an_answer_that_came_in_time_is_not_bought_again_on_a_starved_loop():
    """Found by the chaos suite beside a CPU hog (issue 19): the provider answered within the worker's timeout, but
    the worker-adapter's loop was too busy to read the answer before its own timer came round; the try counted as
    timed out and the retry paid the provider a second time. Failed before: two provider calls, ``faults`` timeout."""
    provider = Scripted([], hold_s=0.05)  # answers 50 ms after the call
    adapter, _ = _adapter(provider, timeout_s=0.2)
    asyncio.get_running_loop().call_later(0.01, time.sleep, 0.5)  # then the loop is starved for 0.5 s
    reply = await adapter.call(WorkRequest(worker="w", messages=HELLO))
    assert reply.error is None and reply.attempts == 1 and reply.faults == {}
    assert len(provider.calls) == 1
