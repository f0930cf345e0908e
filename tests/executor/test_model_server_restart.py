"""A durable task outlives a model server's restart (issue 19, item 8: the vLLM trial's server was back after 94 s):
transient worker failures are retried for the retry horizon (``CONDUCTOR_RETRY_HORIZON_S``, 600 s by default), not
for the worker-adapter's own few tries. Here through the real services and the real ``openai`` SDK against a local
server that refuses connections for a while, then answers; time scaled down (the same run with every default and
a 94 s outage was answered at 101.5 s)."""

from __future__ import annotations

import asyncio
import time

import pytest

from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient
from conductor.natsserver import free_port
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest
from services.executor.config import IntakeSettings
from tests.worker_adapter.fakeapi import FakeAPI, openai_ok

pytestmark = pytest.mark.nats

OUTAGE_S = 3.0


def test_the_default_horizon_outlives_a_model_server_restart():
    assert IntakeSettings().retry_horizon_s >= 120


async def test_a_durable_task_waits_out_a_model_server_restart(nats_url, subject_prefix, tmp_path):
    port = free_port()  # nothing listens here until the "restart" is over: connections are refused
    pool = tmp_path / "pool.toml"
    pool.write_text(
        f'[[workers]]\nname = "smol"\nprovider = "openai_compatible"\nmodel = "smol"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\nmax_retries = 1\n'
    )
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(pool),
        "CONDUCTOR_LOG_LEVEL": "ERROR",
        "CONDUCTOR_REDELIVERY_BACKOFF_BASE_S": "0.2",
        "CONDUCTOR_REDELIVERY_BACKOFF_MAX_S": "0.5",
        "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.05",
    }
    settings = CommonSettings.from_env(env)
    async with running(
        create_services(["executor", "planner", "worker-adapter", "verifier"], env),
        settings,
        name="model-restart",
    ):
        async with ConductorClient(settings) as client:
            started = time.monotonic()
            task_id = await client.submit(
                SolveRequest(question="What is 2 + 2?", pool=["smol"], policy="single")
            )
            await asyncio.sleep(OUTAGE_S)
            with FakeAPI([openai_ok("Final answer: 4")] * 3, port=port) as api:
                result = await client.result(task_id, wait=60)
    assert result.error is None and result.answer == "Final answer: 4", result.error
    assert time.monotonic() - started >= OUTAGE_S and len(api.seen) == 1
