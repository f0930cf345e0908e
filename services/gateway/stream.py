"""``stream=true``: server-sent events in OpenAI's chunk format.

The stream opens with the assistant role, carries (only when the client asked with ``conductor_progress``) one
extra chunk per progress event — ``choices: []`` and a ``conductor`` field, the shape OpenAI uses for its own
usage-only chunk, so plain clients that skip empty choices are unaffected — and SSE comment lines as keep-alives
while the task runs; then the answer in word-aligned pieces, a final chunk with ``finish_reason`` and usage
(tokens, $, calls), and ``data: [DONE]``. A task that ends without an answer ends the stream with an ``error``
event, which the OpenAI SDKs raise as ``APIError``.

A client that goes away mid-stream cancels this handler (aiohttp's handler cancellation): the pending reply and
the progress subscription are dropped in ``finally``; the task itself finishes on the executor (request/reply) or
is kept in the results bucket (durable) — never left waiting on the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import msgspec
from aiohttp import web

from conductor import metrics
from schemas.solve import ProgressEvent, SolveRequest, SolveResult
from services.gateway.keys import ApiKey
from services.gateway.openai_api import (
    ChatCompletionRequest,
    GatewayError,
    answer_pieces,
    chunk,
    conductor_body,
    error_from,
    finish_reason,
    usage_body,
)
from services.gateway.quota import Hold
from services.gateway.routes import NO_ANSWER, Door

_enc = msgspec.json.Encoder()


async def _send(response: web.StreamResponse, payload: object) -> None:
    await response.write(b"data: " + _enc.encode(payload) + b"\n\n")


async def stream_chat(
    request: web.Request, door: Door, key: ApiKey, req: ChatCompletionRequest, solve: SolveRequest, hold: Hold | None
) -> web.StreamResponse:
    task_id = solve.task_id or ""
    created = int(time.time())
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    await _send(response, chunk(task_id, req.model, created, [_delta({"role": "assistant", "content": ""})]))
    metrics.GATEWAY_IN_FLIGHT.inc()
    try:
        async with contextlib.AsyncExitStack() as stack:
            events = await stack.enter_async_context(door.bus.progress(task_id)) if solve.progress else None
            task = door.start(key, solve, hold, req.durable)  # settled when it ends, whether or not anyone waits
            result = await _wait(response, task, events, door.settings.keepalive_s, req.model, created, task_id)
    except asyncio.CancelledError:
        metrics.GATEWAY_DISCONNECTS.labels(key.name).inc()
        raise
    except ConnectionResetError:  # noticed on a keep-alive write rather than as a cancellation
        metrics.GATEWAY_DISCONNECTS.labels(key.name).inc()
        return response
    except GatewayError as exc:
        await _send(response, exc.body())
        await response.write(b"data: [DONE]\n\n")
        return response
    finally:
        metrics.GATEWAY_IN_FLIGHT.dec()
    await _finish(response, result, req, created)
    return response


async def _wait(
    response: web.StreamResponse,
    task: asyncio.Future[SolveResult],
    events: asyncio.Queue[ProgressEvent] | None,
    keepalive_s: float,
    model: str,
    created: int,
    task_id: str,
) -> SolveResult:
    """Relay progress (if asked) and keep-alives until the task's result is in."""
    while True:
        getter = asyncio.ensure_future(events.get()) if events is not None else None
        waiting = {task} if getter is None else {task, getter}
        try:
            done, _ = await asyncio.wait(waiting, timeout=keepalive_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if getter is not None and not getter.done():
                getter.cancel()
        if getter is not None and getter in done:
            event = getter.result()
            await _send(response, chunk(task_id, model, created, [], conductor={"progress": msgspec.to_builtins(event)}))
        if task in done:
            return task.result()
        if not done:
            await response.write(b": keep-alive\n\n")


async def _finish(response: web.StreamResponse, result: SolveResult, req: ChatCompletionRequest, created: int) -> None:
    task_id = result.task_id
    if result.answer is None:
        await _send(response, error_from(result.error or NO_ANSWER).body())
        await response.write(b"data: [DONE]\n\n")
        return
    for piece in answer_pieces(result.answer):
        await _send(response, chunk(task_id, req.model, created, [_delta({"content": piece})]))
    usage = usage_body(result.usage.total)
    separate = req.stream_options is not None and req.stream_options.include_usage
    last = [_delta({}, finish_reason(result))]
    extra: dict[str, object] = {"conductor": conductor_body(result)}
    if not separate:
        extra["usage"] = usage
    await _send(response, chunk(task_id, req.model, created, last, **extra))
    if separate:  # OpenAI's own shape for stream_options.include_usage: one more chunk, no choices
        await _send(response, chunk(task_id, req.model, created, [], usage=usage))
    await response.write(b"data: [DONE]\n\n")


def _delta(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

