"""A bounded, fairly shared verifier (issue 9 item 6): caps on tests per item and items per batch come back as typed
errors, and sandboxes are shared round-robin across requesters, so one client's batch of infinite loops does not
queue another client's single item behind all of it."""

from __future__ import annotations

import asyncio

import pytest

from schemas.errors import ErrorCode
from schemas.verify import IOTest, Outcome, StdioTestsReference, TextReference, VerifyBatch, VerifyRequest
from services.verifier.app import VerifierService
from services.verifier.core import BatchTooLarge, Verifier
from tests.verifier.conftest import make_settings, sandbox_capable

SPIN = "```python\nwhile True:\n    pass\n```"
QUICK = "```python\nprint(int(input()) + 1)\n```"


def stdio(n: int) -> StdioTestsReference:
    return StdioTestsReference(tests=[IOTest(input=str(i), output=str(i + 1)) for i in range(n)])


@pytest.mark.asyncio(loop_scope="session")
async def test_too_many_tests_in_one_item_is_a_typed_error(verifier: Verifier) -> None:
    cap = verifier.settings.max_tests_per_item
    verdict = await verifier.verify(VerifyRequest(id="many", response=QUICK, reference=stdio(cap + 1)))
    assert verdict.outcome == Outcome.ERROR and verdict.error is not None
    assert verdict.error.code == ErrorCode.BAD_REQUEST and verdict.error.field == "reference.tests"
    assert not verdict.error.retryable


@pytest.mark.asyncio(loop_scope="session")
async def test_too_many_items_in_one_batch_is_a_typed_error(verifier: Verifier) -> None:
    cap = verifier.settings.max_batch_items
    items = [
        VerifyRequest(id=str(i), response=r"\boxed{1}", reference=TextReference(answer="1"))
        for i in range(cap + 1)
    ]
    with pytest.raises(BatchTooLarge):
        await verifier.verify_batch(items)
    svc = VerifierService(make_settings(), verifier)
    await svc.start(None)  # type: ignore[arg-type]
    result = await svc.handle_verify(VerifyBatch(items=items))
    assert result.verdicts == [] and result.error is not None
    assert result.error.code == ErrorCode.BAD_REQUEST and result.error.field == "items"


@pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")
@pytest.mark.asyncio(loop_scope="session")
async def test_one_clients_infinite_loops_do_not_queue_another_clients_item() -> None:
    settings = make_settings(CONDUCTOR_SANDBOX_WORKERS="2", CONDUCTOR_VERIFIER_STDIO_TIMEOUT_S="0.5")
    finished: list[str] = []

    async with Verifier(settings) as verifier:

        async def one(verifier: Verifier, request: VerifyRequest) -> None:
            verdict = (await verifier.verify_batch([request]))[0]
            finished.append(request.id)
            assert verdict.outcome == Outcome.CORRECT, verdict.reason

        loops = [VerifyRequest(id=f"loop-{i}", response=SPIN, reference=stdio(1)) for i in range(8)]
        greedy = asyncio.ensure_future(order(verifier, loops, finished))
        await asyncio.sleep(0.1)  # the loops hold every sandbox and fill the queue first
        await one(verifier, VerifyRequest(id="polite", response=QUICK, reference=stdio(1)))
        await greedy
    position = finished.index("polite")
    # First come, first served put it after 7 of the 8 loops; in turn, it gets the second sandbox freed after it
    # arrives (the loops' requester had a waiter in line first), so at most 5 loops can finish before it.
    assert position <= 5, f"the single item finished after {position} of the 8 loops: {finished}"


async def order(verifier: Verifier, requests: list[VerifyRequest], finished: list[str]) -> None:
    """One client's batch, recording each verdict as it completes."""
    async for verdict in verifier.stream(requests):
        finished.append(verdict.id)


@pytest.mark.asyncio
async def test_fair_queue_serves_requesters_in_turn_and_skips_cancelled_waiters() -> None:
    from services.verifier.fairness import FairQueue

    queue: FairQueue[str] = FairQueue()
    got: list[str] = []

    async def take(key: str, label: str) -> None:
        await queue.get(key)
        got.append(label)

    waiters = [asyncio.ensure_future(take("a", f"a{i}")) for i in range(3)]
    waiters.append(asyncio.ensure_future(take("b", "b0")))
    gone = asyncio.ensure_future(take("c", "c0"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    for _ in range(4):
        queue.put("item")
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert got == ["a0", "b0", "a1", "a2"]
    queue.put("spare")
    assert list(queue.free) == ["spare"] and not queue.waiting and not queue.turns
