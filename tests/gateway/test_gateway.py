"""The gateway on a real nats-server with the services running: the real `openai` SDK (sync, async, streaming)
and a plain HTTP client for everything an SDK never sends (malformed JSON, wrong types, huge bodies, bad keys)."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import msgspec
import nats
import openai
import pytest

from conductor import metrics
from schemas.tasks import Names
from services.gateway.quota import KeyLoad
from tests.conductor.scrape import delta, parse, value
from tests.gateway.conftest import QUESTION, slow_pool, start_gateway

pytestmark = pytest.mark.nats


def client(gw, key=None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=key or gw.key, max_retries=0)


def counter(name: str, **labels: str) -> float:
    return value(parse(metrics.exposition().decode()), name, **labels)


async def test_sync_sdk_gets_an_answer_with_usage_dollars_and_calls(gateway):
    def call():
        sync = openai.OpenAI(base_url=gateway.url + "/v1", api_key=gateway.key, max_retries=0)
        return sync.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": QUESTION}]
        )

    reply = await asyncio.to_thread(call)
    assert reply.object == "chat.completion" and reply.model == "conductor"
    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens > 0
    assert (
        reply.usage.model_extra["cost_usd"] > 0 and reply.usage.model_extra["calls"] >= 2
    )  # MoA: proposers + aggregator
    assert reply.model_extra["conductor"]["steps"] == reply.usage.model_extra["calls"]


async def test_async_sdk_model_picks_worker_or_baseline(gateway):
    sdk = client(gateway)
    single = await sdk.chat.completions.create(
        model="sim-math", messages=[{"role": "user", "content": QUESTION}]
    )
    assert single.model_extra["conductor"]["workers"] == ["sim-math"]
    refine = await sdk.chat.completions.create(
        model="refine:2", messages=[{"role": "user", "content": QUESTION}]
    )
    assert refine.model_extra["conductor"]["steps"] == 2
    models = await sdk.models.list()
    ids = [m.id for m in models.data]
    assert ids[:2] == ["conductor", "moa"] and "sim-math" in ids
    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": QUESTION}])


async def test_streaming_answer_matches_and_usage_arrives_in_the_final_chunk(gateway):
    sdk = client(gateway)
    stream = await sdk.chat.completions.create(
        model="sim-math", messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    plain = await sdk.chat.completions.create(
        model="sim-math", messages=[{"role": "user", "content": QUESTION}]
    )
    assert text == plain.choices[0].message.content  # sim workers are deterministic for the same request
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].usage.total_tokens > 0 and chunks[-1].usage.model_extra["calls"] == 1
    assert len({c.id for c in chunks}) == 1


async def test_streaming_usage_chunk_when_asked_and_progress_only_when_asked(gateway):
    sdk = client(gateway)
    stream = await sdk.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": QUESTION}],
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"conductor_progress": True},
    )
    chunks = [c async for c in stream]
    progress = [
        c.model_extra["conductor"]["progress"]["kind"]
        for c in chunks
        if not c.choices and "conductor" in c.model_extra
    ]
    assert "planned" in progress and "step_done" in progress
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0  # OpenAI's usage-only chunk
    assert all(
        c.usage is None for c in chunks[:-1]
    )  # usage once: clients that add up chunks do not double it


async def test_durable_path_and_fetching_the_task_later_with_its_own_key_only(gateway):
    sdk = client(gateway)
    reply = await sdk.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": QUESTION}], extra_body={"durable": True}
    )
    task_id = reply.model_extra["conductor"]["task_id"]
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{gateway.url}/v1/conductor/tasks/{task_id}", headers=_auth(gateway.key)
        ) as resp:
            assert resp.status == 200
            assert (await resp.json())["choices"][0]["message"]["content"] == reply.choices[0].message.content
        async with http.get(
            f"{gateway.url}/v1/conductor/tasks/{task_id}", headers=_auth(gateway.limited_key)
        ) as resp:
            assert resp.status == 404


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _post(gw, body: bytes | str, headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as http:
        data = body.encode() if isinstance(body, str) else body
        async with http.post(
            gw.url + "/v1/chat/completions",
            data=data,
            headers=headers if headers is not None else _auth(gw.key),
        ) as resp:
            return resp.status, await resp.json(content_type=None), dict(resp.headers)


@pytest.mark.parametrize(
    ("body", "status", "param", "code"),
    [
        ("{not json", 400, None, "invalid_json"),
        ('{"model": "conductor", "messages": "hello"}', 400, "messages", "invalid_request"),
        ('{"model": 5, "messages": []}', 400, "model", "invalid_request"),
        ('{"messages": [{"role": "user", "content": "hi"}]}', 400, "model", "invalid_request"),
        (
            '{"model": "conductor", "messages": [{"role": "wizard", "content": "hi"}]}',
            400,
            "messages[0].role",
            "invalid_request",
        ),
        (
            '{"model": "conductor", "messages": [{"role": "user", "content": "hi"}], "n": 3}',
            400,
            "n",
            "invalid_request",
        ),
        (
            '{"model": "conductor", "messages": [{"role": "user", "content": "hi"}], "pool": ["nobody"]}',
            400,
            "pool[0]",
            "bad_request",
        ),
    ],
)
async def test_plain_http_bad_bodies_get_openai_error_shape(gateway, body, status, param, code):
    got, payload, _ = await _post(gateway, body)
    assert got == status, payload
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    assert (payload["error"]["param"], payload["error"]["code"]) == (param, code)


async def test_huge_bodies_are_refused_before_reading(gateway):
    huge = b'{"model": "conductor", "messages": [{"role": "user", "content": "' + b"x" * 2_000_000 + b'"}]}'
    status, payload, _ = await _post(gateway, huge)
    assert (status, payload["error"]["code"]) == (413, "payload_too_large")

    async def chunked():  # no Content-Length: aiohttp's read limit still stops it
        for _ in range(40):
            yield b"x" * 65536

    async with aiohttp.ClientSession() as http:
        async with http.post(
            gateway.url + "/v1/chat/completions", data=chunked(), headers=_auth(gateway.key)
        ) as resp:
            assert resp.status == 413


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer cnd-wrong"}, "invalid_api_key"),
        ({"Authorization": "Basic abc"}, "missing_api_key"),
    ],
)
async def test_requests_without_a_valid_key_get_401(gateway, headers, code):
    body = json.dumps({"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]})
    status, payload, _ = await _post(gateway, body, headers)
    assert (status, payload["error"]["code"]) == (401, code)
    with pytest.raises(openai.AuthenticationError):
        await client(gateway, "cnd-wrong").models.list()


async def test_rate_and_spend_limits_give_429_with_retry_after_and_per_key_metrics(gateway, nats_url):
    body = json.dumps({"model": "sim-small", "messages": [{"role": "user", "content": QUESTION}]})
    before = counter("conductor_gateway_requests_total", key="limited", status="429")
    statuses = [(await _post(gateway, body, _auth(gateway.limited_key)))[0] for _ in range(2)]
    status, payload, headers = await _post(gateway, body, _auth(gateway.limited_key))
    assert statuses == [200, 200] and status == 429 and payload["error"]["code"] == "rate_limit_exceeded"
    assert 1 <= int(headers["Retry-After"]) <= 60
    assert counter("conductor_gateway_requests_total", key="limited", status="429") == before + 1
    assert counter("conductor_gateway_cost_usd_total", key="limited") > 0

    # A request's reservation must fit under the day's limit before it runs: with half the limit spent, the
    # spender's (the whole limit) does not, so nothing is spent (issue 19, item 3: the limit is never overshot by a
    # request that was admitted anyway).
    nc = await nats.connect(nats_url)
    kv = await nc.jetstream().key_value(Names.for_prefix(gateway.prefix).gateway_quota_bucket)
    await kv.put("spender", msgspec.json.encode(KeyLoad(day=int(time.time() // 86400), spend_usd=5e-10)))
    await nc.close()
    status, payload, _ = await _post(gateway, body, _auth(gateway.spend_key))
    assert (status, payload["error"]["code"]) == (429, "spend_limit_exceeded")
    assert counter("conductor_gateway_cost_usd_total", key="spender") == 0
    with pytest.raises(openai.RateLimitError):
        await client(gateway, gateway.spend_key).chat.completions.create(
            model="sim-small", messages=[{"role": "user", "content": "hi"}]
        )


async def test_no_executor_means_503_with_retry_after(nats_url, subject_prefix, tmp_path):
    ctx, gw = await start_gateway(nats_url, subject_prefix, tmp_path, services=())
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        body = json.dumps({"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]})
        status, payload, headers = await _post(gw, body)
        assert (status, payload["error"]["type"], headers["Retry-After"]) == (503, "service_unavailable", "1")
        stream = await client(gw).chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
        with pytest.raises(openai.APIError, match="no executor"):
            async for _ in stream:
                pass


async def _settled(nats_url: str, gw, key: str) -> KeyLoad:
    """The key's quota record once its request settled: no hold left and something spent (waits up to 20 s)."""
    nc = await nats.connect(nats_url)
    try:
        kv = await nc.jetstream().key_value(Names.for_prefix(gw.prefix).gateway_quota_bucket)
        for _ in range(200):
            load = msgspec.json.decode((await kv.get(key)).value, type=KeyLoad)
            if not load.holds and load.spend_usd > 0:
                return load
            await asyncio.sleep(0.1)
        raise AssertionError(f"never settled: {load}")
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("stream", "durable"),
    [(True, False), (False, False), (False, True)],
    ids=["streamed", "plain", "durable"],
)
async def test_a_hang_up_cancels_the_task_and_the_key_pays_for_what_ran(
    nats_url, subject_prefix, tmp_path, stream, durable
):
    """Issue 19, item 3: the client leaves while the first of three 1-second steps runs (streamed or not, on the
    request/reply path or the durable one). The gateway cancels the task: the running step finishes, no further
    worker call is made, and the key is charged exactly what the calls that ran cost. Failed before: the task ran
    its three steps to the end for no one, and the key paid for all three."""
    ctx, gw = await start_gateway(
        nats_url, subject_prefix, tmp_path, pool=slow_pool(tmp_path, 1.0), keepalive_s=0.1
    )
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        before = parse(metrics.exposition().decode())
        body = json.dumps(
            {
                "model": "refine:3",
                "messages": [{"role": "user", "content": QUESTION}],
                "stream": stream,
                "conductor_progress": stream,
                "durable": durable,
            }
        )
        async with aiohttp.ClientSession() as http:
            if stream:
                resp = await http.post(
                    gw.url + "/v1/chat/completions", data=body, headers=_auth(gw.metered_key)
                )
                assert resp.status == 200
                async for line in resp.content:  # role chunk, keep-alives, then the plan: the first step runs
                    if b'"planned"' in line:
                        break
                else:
                    raise AssertionError("the stream ended before the task was planned")
                await asyncio.sleep(0.4)
                resp.close()  # hang up mid-step
            else:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(
                        http.post(gw.url + "/v1/chat/completions", data=body, headers=_auth(gw.metered_key)),
                        0.6,
                    )
        load = await _settled(nats_url, gw, "metered")
        await asyncio.sleep(
            1.5
        )  # longer than a step: a call started after the hang-up would have finished by now
        after = parse(metrics.exposition().decode())
        ran = delta(before, after, "conductor_worker_calls_total")
        assert 1 <= ran < 3, (
            ran
        )  # the step running at the hang-up (two if it ended just then), never the third
        assert load.spend_usd == pytest.approx(delta(before, after, "conductor_cost_usd_total"), rel=1e-6)
        assert delta(before, after, "conductor_gateway_worker_calls_total", key="metered") == ran
        assert delta(before, after, "conductor_tasks_total", outcome="cancelled") == 1
        assert metrics.GATEWAY_IN_FLIGHT._value.get() == 0 and gw.service.bus.pending() == 0
        assert delta(before, after, "conductor_gateway_client_disconnects_total", key="metered") == 1
        if not stream:  # issue 19, item 7: a hang-up is counted as such (499), not as a server error
            assert delta(before, after, "conductor_gateway_requests_total", key="metered", status="499") == 1
            assert delta(before, after, "conductor_gateway_requests_total", key="metered", status="500") == 0


async def test_executor_killed_mid_task_is_a_503_in_seconds_not_the_solve_timeout(
    nats_url, subject_prefix, tmp_path
):
    """The executor beats while it runs a gateway's solve; SIGKILLed mid-task, it falls silent and the client gets
    a retryable 503 after three missed beats, long before the 10-minute solve timeout."""
    import os
    import signal
    import sys

    pool = slow_pool(tmp_path, 1.0)
    ctx, gw = await start_gateway(
        nats_url, subject_prefix, tmp_path, pool=pool, services=("planner", "worker-adapter", "verifier")
    )
    env = {
        **os.environ,
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(pool),
        "CONDUCTOR_METRICS_PORT": "off",
        "CONDUCTOR_LOG_LEVEL": "WARNING",
    }
    executor = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "conductor.app.cli",
        "serve",
        "executor",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert executor.stderr is not None
        while not (await executor.stderr.readline()).startswith(b"serving"):
            assert executor.returncode is None
        async with ctx:
            gw.url = f"http://127.0.0.1:{gw.service.port}"
            body = json.dumps({"model": "refine:5", "messages": [{"role": "user", "content": QUESTION}]})
            request = asyncio.ensure_future(_post(gw, body))
            await asyncio.sleep(1.5)  # the task is running its steps
            executor.send_signal(signal.SIGKILL)
            status, payload, headers = await asyncio.wait_for(request, timeout=60)
            assert (status, payload["error"]["code"], headers["Retry-After"]) == (503, "unavailable", "1")
            assert "stopped answering" in payload["error"]["message"]
    finally:
        if executor.returncode is None:
            executor.kill()
        await executor.wait()


async def _raw(gw, request: bytes) -> bytes:
    """Bytes on a plain socket: what no HTTP client library will send (a non-UTF-8 header, a stalled body)."""
    port = gw.service.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 30)
    finally:
        writer.close()


async def test_every_failure_is_in_openais_error_shape(gateway):
    """Issue 19, item 7: 404, 405, a non-UTF-8 key byte (no key needed to send it) and deep nesting."""
    async with aiohttp.ClientSession() as http:
        async with http.get(gateway.url + "/v1/nothing-here") as resp:
            assert resp.status == 404 and (await resp.json())["error"]["code"] == "not_found"
        async with http.put(gateway.url + "/v1/chat/completions", headers=_auth(gateway.key)) as resp:
            assert resp.status == 405 and (await resp.json())["error"]["code"] == "method_not_allowed"
    deep = '{"model": "conductor", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}"
    status, payload, _ = await _post(gateway, deep)
    assert status == 400 and payload["error"]["code"] in {"invalid_json", "invalid_request"}, payload
    body = json.dumps({"model": "conductor", "messages": [{"role": "user", "content": "hi"}]}).encode()
    raw = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer cnd-\xff\xfe\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    answer = await _raw(gateway, raw)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b'"invalid_api_key"' in answer


async def test_a_body_that_never_arrives_is_a_408_not_a_held_connection(nats_url, subject_prefix, tmp_path):
    ctx, gw = await start_gateway(nats_url, subject_prefix, tmp_path, body_timeout_s=1.0)
    async with ctx:
        gw.url = f"http://127.0.0.1:{gw.service.port}"
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {gw.key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"
        ).encode()
        answer = await _raw(gw, head)
    assert answer.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in answer, answer[:200]


async def test_spend_is_reserved_so_concurrency_cannot_overshoot_a_limit(gateway):
    """Issue 19, item 3: 40 requests at once on a key limited to $0.0003 a day, each holding $0.00005 while it runs
    (and sent with that as its budget): at most six run at a time, the rest get 429 while the holds are taken, and
    what the key spent stays under its limit whatever the concurrency (before: all 40 admitted, ~$0.0005 spent).
    Each request here is one cheap call, below its hold; a request whose steps run in parallel can pass its budget
    by the calls of one step (the executor checks the budget between steps)."""
    body = json.dumps({"model": "sim-small", "messages": [{"role": "user", "content": QUESTION}]})
    results = await asyncio.gather(*(_post(gateway, body, _auth(gateway.reserved_key)) for _ in range(40)))
    statuses = [status for status, _, _ in results]
    assert statuses.count(200) >= 1 and statuses.count(429) >= 1, statuses
    codes = {payload["error"]["code"] for status, payload, _ in results if status == 429}
    assert codes <= {"spend_limit_exceeded", "in_flight_limit_exceeded"}, codes
    spent = counter("conductor_gateway_cost_usd_total", key="reserved")
    assert 0 < spent <= 0.0003 + 1e-12, spent
