"""Tasks that outlive the gateway's wait are charged (issue 34): a request/reply solve stops at its deadline and
answers with what ran, which settles the key's spend; a durable task runs on and is settled when its result comes,
and its 504 names the GET that then finds it."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from conductor import metrics
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest
from services.gateway.bus import pending
from services.gateway.calls import Calls
from services.gateway.config import GatewaySettings
from services.gateway.errors import GatewayError
from services.gateway.keys import ANONYMOUS
from tests.conductor.scrape import delta, parse
from tests.gateway.conftest import QUESTION, slow_pool, start_gateway
from tests.gateway.test_gateway import _auth, _post, _settled

pytestmark = pytest.mark.nats

TIMEOUT_S = 1.5  # the gateway's wait: the second of three 1-second steps is running when it ends


async def test_a_request_reply_solve_past_its_deadline_settles_what_ran(nats_url, subject_prefix, tmp_path):
    """Failed before: a 504 "fetch it later with GET ..." (no GET ever found a request/reply task), and the key was
    charged $0 for the calls that ran."""
    ctx, gw = await start_gateway(
        nats_url, subject_prefix, tmp_path, pool=slow_pool(tmp_path, 1.0), solve_timeout_s=TIMEOUT_S
    )
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        before = parse(metrics.exposition().decode())
        body = json.dumps({"model": "refine:3", "messages": [{"role": "user", "content": QUESTION}]})
        status, payload, _ = await _post(gw, body, _auth(gw.metered_key))
        load = await _settled(nats_url, gw, "metered")
        after = parse(metrics.exposition().decode())
        ran = delta(before, after, "conductor_worker_calls_total")
        assert 1 <= ran < 3, ran  # stopped at the deadline: never the third step
        assert load.spend_usd == pytest.approx(delta(before, after, "conductor_cost_usd_total"), rel=1e-6)
        assert load.spend_usd > 0
        if status != 200:  # no answer yet when it stopped: the deadline, not a retryable 503
            assert (status, payload["error"]["code"]) == (504, "timeout"), payload
        assert gw.service.bus.pending() == 0


async def test_a_durable_task_that_outlives_the_wait_is_charged_when_it_ends(
    nats_url, subject_prefix, tmp_path
):
    """Failed before: 4 durable tasks spent $0.0079 and were charged $0; a later GET returned the answer, still
    uncharged."""
    ctx, gw = await start_gateway(
        nats_url, subject_prefix, tmp_path, pool=slow_pool(tmp_path, 1.0), solve_timeout_s=TIMEOUT_S
    )
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        before = parse(metrics.exposition().decode())
        body = json.dumps(
            {"model": "refine:3", "messages": [{"role": "user", "content": QUESTION}], "durable": True}
        )
        status, payload, _ = await _post(gw, body, _auth(gw.metered_key))
        assert (status, payload["error"]["code"]) == (504, "task_pending"), payload
        task_id = payload["error"]["message"].split()[1]
        assert f"GET /v1/conductor/tasks/{task_id}" in payload["error"]["message"]
        load = await _settled(nats_url, gw, "metered")  # once the task ended, in the background
        after = parse(metrics.exposition().decode())
        assert delta(before, after, "conductor_worker_calls_total") == 3  # it ran on to its end
        assert load.spend_usd == pytest.approx(delta(before, after, "conductor_cost_usd_total"), rel=1e-6)
        async with aiohttp.ClientSession() as http:
            async with http.get(
                f"{gw.url}/v1/conductor/tasks/{task_id}", headers=_auth(gw.metered_key)
            ) as resp:
                assert resp.status == 200
                fetched = await resp.json()
        assert fetched["usage"]["cost_usd"] == pytest.approx(load.spend_usd, rel=1e-6)


class _PendingBus:
    """A durable task that never ends."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def solve_durable(self, solve, timeout):
        raise pending(solve.task_id or "")

    async def late_result(self, task_id, key, wait):
        self.waiting.set()
        await asyncio.Event().wait()


async def test_a_stopping_gateway_stops_waiting_for_late_results_without_settling_them():
    """The hold of a task still running when the gateway stops expires on its own; it is not settled as $0."""
    bus = _PendingBus()
    calls = Calls(GatewaySettings(common=CommonSettings()), None, bus)  # type: ignore[arg-type]
    settled = []

    async def settle(key, hold, result):
        settled.append(result)

    calls.settle = settle  # type: ignore[method-assign]
    call = calls.start(ANONYMOUS, SolveRequest(question="Q?", task_id="anonymous." + "0" * 32), None, True)
    with pytest.raises(GatewayError, match="still running"):
        await call.result()
    await asyncio.wait_for(bus.waiting.wait(), 5)
    await calls.stop()
    assert settled == [] and not calls._late
