"""Each paid worker call is counted once in calls, tokens and dollars (issue 19, item 7): a step sent again — to the
same replica or another, as after a NATS restart — is answered from the call ledger and counted as a replay only."""

from __future__ import annotations

import pytest

from conductor import metrics
from conductor.app.runtime import running
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.work import ChatMessage, WorkRequest
from services.worker_adapter.app import WorkerAdapterService
from services.worker_adapter.config import WorkerAdapterSettings
from tests.conductor.scrape import delta, parse

pytestmark = pytest.mark.nats

QUESTION = "What is the capital city of Australia?"


async def test_a_replayed_call_is_not_counted_again(nats_url, subject_prefix):
    """Failed before: every replay added a call, its tokens and its dollars again (1,550 calls for 1,500 paid)."""
    common = CommonSettings(nats_url=nats_url, subject_prefix=subject_prefix)
    replicas = [WorkerAdapterService(WorkerAdapterSettings(common=common), load_pool(None)) for _ in range(2)]
    req = WorkRequest(
        worker="sim-frontier",
        messages=[ChatMessage(role="user", content=f"{QUESTION}\n\nAnswer it.")],
        task_id="t-replay",
        round=0,
        step=1,
        idempotent=True,
    )
    async with running(replicas, common, name="replay"):
        before = parse(metrics.exposition().decode())
        first = await replicas[0].handle_work(req)
        # the executor sends the step again (its reply was lost in a reconnect): once to each replica
        again = [await replicas[1].handle_work(req), await replicas[0].handle_work(req)]
        after = parse(metrics.exposition().decode())
    assert first.error is None and not first.replayed and first.usage.cost_usd > 0
    assert all(r.replayed and r.text == first.text for r in again)

    def d(name: str, **labels: str) -> float:
        return delta(before, after, name, worker="sim-frontier", **labels)

    assert d("conductor_worker_calls_total") == 1
    assert d("conductor_worker_replays_total") == 2
    assert d("conductor_tokens_total", direction="input") == first.usage.input_tokens
    assert d("conductor_tokens_total", direction="output") == first.usage.output_tokens
    assert d("conductor_cost_usd_total") == pytest.approx(first.usage.cost_usd)
    assert d("conductor_worker_latency_seconds_count") == 3  # every answer's latency is still observed
