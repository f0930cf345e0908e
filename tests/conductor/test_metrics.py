"""Metrics on a real nats-server: a few solves through every service, then `/metrics` shows them by label.

The registry is process-wide (other tests in this process count too), so every check is a before/after delta.
"""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from conductor import metrics
from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient
from conductor.natsserver import free_port
from conductor.settings import CommonSettings
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveRequest, SolveResult
from schemas.work import WorkReply, WorkRequest
from tests.conductor.scrape import delta, parse, scrape
from tests.executor.test_durable import FlakyPlanner
from tests.executor.test_durable import _settings as durable_settings
from tests.executor.test_durable import _start as start_executor

pytestmark = pytest.mark.nats

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)
WORKERS = ("sim-frontier", "sim-math", "sim-knowledge", "sim-small")


@pytest.fixture
async def served(nats_url, subject_prefix):
    port = free_port()
    env = {"NATS_URL": nats_url, "CONDUCTOR_SUBJECT_PREFIX": subject_prefix, "CONDUCTOR_LOG_LEVEL": "WARNING"}
    settings = CommonSettings.from_env({**env, "CONDUCTOR_METRICS_PORT": str(port)})
    async with running(
        create_services(["executor", "planner", "worker-adapter", "verifier"], env), settings, name="m"
    ):
        yield settings, port


async def test_solves_show_up_in_metrics_by_label(served):
    settings, port = served
    before = await scrape(port)
    async with ConductorClient(settings) as client:
        results = await asyncio.gather(
            *(
                client.solve(SolveRequest(question=QUESTION, domain="math", reference="2"), timeout=60)
                for _ in range(3)
            )
        )
        rejected = await client.solve(SolveRequest(question="q", pool=["gpt-99"]), timeout=30)
        nc = await nats.connect(settings.nats_url)
        reply = await nc.request(settings.subject("conductor.solve.client"), b'{"question": 5}', timeout=30)
        await nc.close()
    assert all(r.error is None for r in results)
    assert rejected.error.code == ErrorCode.BAD_REQUEST
    assert msgspec.json.decode(reply.data, type=SolveResult).error.code == ErrorCode.BAD_REQUEST
    after = await scrape(port)

    def d(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    steps = sum(len(rnd.steps) for r in results for rnd in r.workflows)
    by_worker = {
        w: sum(1 for r in results for rnd in r.workflows for s in rnd.steps if s.worker == w) for w in WORKERS
    }
    assert d("conductor_tasks_total", outcome="ok") == 3
    assert d("conductor_tasks_total", outcome="bad_request") == 2
    assert d("conductor_bad_requests_total", subject="conductor.solve") == 2
    assert d("conductor_steps_total", outcome="ok") == steps > 0
    for worker, n in by_worker.items():
        assert d("conductor_steps_total", worker=worker, outcome="ok") == n
        assert d("conductor_worker_calls_total", worker=worker, outcome="ok") == n
    tokens_in = sum(r.usage.total.input_tokens - r.usage.planner.input_tokens for r in results)
    assert d("conductor_tokens_total", direction="input") == tokens_in > 0
    assert d("conductor_tokens_total", direction="output") > 0
    cost = sum(u.cost_usd for r in results for u in r.usage.by_worker.values())
    assert d("conductor_cost_usd_total") == pytest.approx(cost)
    assert d("conductor_stage_latency_seconds_count", stage="solve") == 3
    assert d("conductor_stage_latency_seconds_count", stage="plan") == 3
    assert d("conductor_stage_latency_seconds_count", stage="step") == steps
    assert d("conductor_stage_latency_seconds_count", stage="work") == steps
    assert d("conductor_stage_latency_seconds_count", stage="verify") == 3
    assert d("conductor_stage_latency_seconds_sum", stage="solve") > 0
    assert d("conductor_verdicts_total") == 3
    assert d("conductor_verdicts_total", outcome=str(results[0].verdict.outcome)) >= 1
    assert d("conductor_plans_total", outcome="ok") == 3


def test_worker_reply_accounting_keeps_labels_bounded():
    """Retries are attempts - 1; cache hits/misses only for cache-enabled calls; an unknown worker adds no series."""
    before = parse(metrics.exposition().decode())
    cached = WorkRequest(worker="sim-math", messages=[], cache=True)
    metrics.work_finished(cached, WorkReply(worker="sim-math", attempts=3, cached=True), "conductor.work")
    unknown = ErrorInfo(code=ErrorCode.BAD_REQUEST, message="unknown worker", field="worker")
    metrics.work_finished(
        WorkRequest(worker="x" * 50, messages=[]), WorkReply(worker="x" * 50, error=unknown), "s"
    )
    text = metrics.exposition().decode()
    after = parse(text)
    assert delta(before, after, "conductor_worker_retries_total", worker="sim-math", reason="recovered") == 2
    assert delta(before, after, "conductor_cache_hits_total", worker="sim-math") == 1
    assert delta(before, after, "conductor_cache_misses_total", worker="sim-math") == 0
    assert delta(before, after, "conductor_bad_requests_total", subject="s") == 1
    assert "x" * 50 not in text


def test_worker_faults_are_counted_by_reason_once():
    """Every failed try counts under its reason, the last one of a failed call too; a replayed reply (counted when
    the call first finished) and a cache hit add nothing; a reason outside the vocabulary is ``other``."""
    before = parse(metrics.exposition().decode())
    req = WorkRequest(worker="sim-math", messages=[])
    recovered = WorkReply(worker="sim-math", attempts=4, faults={"rate_limited": 2, "timeout": 1})
    gave_up = WorkReply(
        worker="sim-math",
        attempts=2,
        faults={"server_error": 2},
        error=ErrorInfo(code=ErrorCode.WORKER_ERROR, message="gave up", retryable=True),
    )
    for reply in (recovered, gave_up):
        metrics.work_finished(req, reply, "conductor.work")
    metrics.work_finished(req, msgspec.structs.replace(recovered, replayed=True), "conductor.work")
    metrics.work_finished(req, msgspec.structs.replace(recovered, cached=True, attempts=0), "conductor.work")
    metrics.work_finished(req, WorkReply(worker="sim-small", faults={"x" * 40: 1}), "conductor.work")
    text = metrics.exposition().decode()
    after = parse(text)

    def d(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    faults = "conductor_worker_faults_total"
    assert d(faults, worker="sim-math", reason="rate_limited") == 2
    assert d(faults, worker="sim-math", reason="timeout") == 1
    assert d(faults, worker="sim-math", reason="server_error") == 2
    assert d(faults, worker="sim-math") == 5  # not 8: the replay did not count again
    assert d(faults, worker="sim-small", reason="other") == 1 and "x" * 40 not in text
    # retries agree: the replay's extra tries were counted with the original call
    assert d("conductor_worker_retries_total", worker="sim-math", reason="recovered") == 3
    assert d("conductor_worker_retries_total", worker="sim-math", reason="exhausted") == 1


async def test_durable_redeliveries_and_dead_letters_are_counted(nats_url, subject_prefix):
    """Three deliveries of a task whose planner stays down: two redeliveries, one dead letter, one task."""
    settings = durable_settings(nats_url, subject_prefix, max_deliver=3)
    _svc, broker = await start_executor(settings, FlakyPlanner(failures=100))
    before = parse(metrics.exposition().decode())
    try:
        async with ConductorClient(settings.common) as client:
            await client.submit(SolveRequest(question="Q?", task_id="dead-m"))
            res = await client.result("dead-m", wait=15)
    finally:
        await broker.stop()
    after = parse(metrics.exposition().decode())
    assert res.error.code == ErrorCode.UNAVAILABLE
    assert delta(before, after, "conductor_redeliveries_total") == 2
    assert delta(before, after, "conductor_dead_letters_total") == 1
    assert delta(before, after, "conductor_tasks_total", outcome="unavailable") == 1
