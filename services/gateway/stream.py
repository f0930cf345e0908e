"""Server-sent events: any async stream of protocol structs onto the wire, with keep-alives while it is silent.

``keepalive`` wraps any async iterator, yielding ``KEEPALIVE`` whenever it has been silent for a while (proxies
drop idle connections); ``send_events`` writes each struct as ``data: <json>``, each keep-alive as an SSE comment
line, and ``data: [DONE]`` at the end. The response opens with the stream's first item, so a failure before it (a
429 at admission, say) is still a plain HTTP error; a failure after it is the stream's last event, in OpenAI's
error shape (what the OpenAI SDKs raise as ``APIError``).

A client that goes away mid-stream cancels the handler (aiohttp's handler cancellation) or fails a write: either
way the stream is closed, so the code producing it sees the hang-up where it waits (services/gateway/serving.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import TypeVar

from aiohttp import web

from services.gateway.errors import classify
from services.gateway.protocol import encode

T = TypeVar("T")
HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class KeepAlive:
    """What ``keepalive`` yields while the stream it wraps is silent."""


KEEPALIVE = KeepAlive()


async def _next(stream: AsyncGenerator[T, None]) -> T:
    return await anext(stream)


async def keepalive(stream: AsyncGenerator[T, None], every_s: float) -> AsyncGenerator[T | KeepAlive, None]:
    """``stream``'s items as they come, and ``KEEPALIVE`` after every ``every_s`` of silence. Closing this closes
    ``stream``: a pending read is cancelled there (where the stream waits), then the stream's cleanup runs."""
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.create_task(_next(stream))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield KEEPALIVE
                continue
            read, pending = pending, None
            try:
                item = read.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.wait({pending})
            if not pending.cancelled():
                pending.exception()  # the stream's own failure on its way out: retrieved, ours goes on
        await stream.aclose()


async def send_events(request: web.Request, events: AsyncGenerator[object, None]) -> web.StreamResponse:
    """Write ``events`` (protocol structs, or ``KEEPALIVE``) as server-sent events, then ``[DONE]``."""
    response = web.StreamResponse(headers=HEADERS)
    end = b"data: [DONE]\n\n"
    try:
        async for event in events:
            if not response.prepared:
                await response.prepare(request)
            await response.write(
                b": keep-alive\n\n" if event is KEEPALIVE else b"data: " + encode(event) + b"\n\n"
            )
    except ConnectionResetError:  # the client went away, noticed by a write before any cancellation
        return response
    except Exception as exc:
        if not response.prepared:
            raise  # nothing sent yet: a plain HTTP error (services/gateway/errors.py)
        error = classify(exc, request)
        assert error is not None  # only an aiohttp redirect is not an error, and a stream never raises one
        end = b"data: " + encode(error.response()) + b"\n\n" + end
    finally:
        await events.aclose()
    if not response.prepared:
        await response.prepare(request)
    with contextlib.suppress(ConnectionResetError):
        await response.write(end)
    return response
