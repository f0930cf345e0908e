"""The HTTP routes, thin: authenticate, read the typed body, call the serving function, encode what it returns (a
response struct as JSON, a stream of chunks as server-sent events). Failures are raised and answered in OpenAI's
error shape by one middleware (services/gateway/errors.py); ``metered`` counts every chat request by key, status
and whether it streamed.

``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /v1/models/{model}``, ``GET /v1/conductor/tasks/{id}``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TypeVar

import msgspec
from aiohttp import web

from conductor import metrics
from services.gateway.config import GatewaySettings
from services.gateway.errors import GatewayError, Handler, too_large
from services.gateway.keys import ANONYMOUS, ApiKey, KeyRing
from services.gateway.protocol import ChatCompletionRequest, ChatCompletionResponse, encode
from services.gateway.serving import Serving
from services.gateway.stream import keepalive, send_events

T = TypeVar("T")
CLIENT_CLOSED = 499
"""The status a request the client hung up on is counted under (nginx's convention); it is never sent."""
_chat_request = msgspec.json.Decoder(ChatCompletionRequest)


@dataclass(slots=True)
class Meter:
    """What ``metered`` labels a chat request with, learnt as the handler goes."""

    key: str = ANONYMOUS.name
    stream: bool = False


METER = web.RequestKey("meter", Meter)


@web.middleware
async def metered(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``conductor_gateway_requests_total`` for the requests a handler put a ``Meter`` on: the status sent, or 499
    for a client that hung up (not a server error)."""
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except asyncio.CancelledError:
        status = CLIENT_CLOSED
        raise
    finally:
        if (meter := request.get(METER)) is not None:
            metrics.gateway_request(meter.key, status, meter.stream)


def routes(serving: Serving, keys: KeyRing | None, settings: GatewaySettings) -> list[web.RouteDef]:
    def authenticate(request: web.Request) -> ApiKey:
        return ANONYMOUS if keys is None else keys.authenticate(request.headers.get("Authorization", ""))

    async def chat(request: web.Request) -> web.StreamResponse:
        meter = request[METER] = Meter()
        key = authenticate(request)
        meter.key = key.name
        req = await read_body(request, _chat_request, settings)
        meter.stream = req.stream
        reply = await serving.chat(key, req)
        if isinstance(reply, ChatCompletionResponse):
            return json_response(reply)
        return await send_events(request, keepalive(reply, settings.keepalive_s))

    async def models(request: web.Request) -> web.Response:
        authenticate(request)
        return json_response(serving.models())

    async def model(request: web.Request) -> web.Response:
        authenticate(request)
        return json_response(serving.model(request.match_info["model"]))

    async def task(request: web.Request) -> web.Response:
        key = authenticate(request)
        return json_response(await serving.task(key, request.match_info["task_id"]))

    return [
        web.post("/v1/chat/completions", chat),
        web.get("/v1/models", models),
        web.get("/v1/models/{model}", model),
        web.get("/v1/conductor/tasks/{task_id}", task),
    ]


async def read_body(request: web.Request, decoder: msgspec.json.Decoder[T], settings: GatewaySettings) -> T:
    """The request body decoded, within the size and time limits. A body over the limit is refused from its
    Content-Length before a byte is read, or by aiohttp's read limit (``client_max_size``, chunked bodies too)."""
    limit = settings.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    try:
        async with asyncio.timeout(settings.body_timeout_s):
            body = await request.read()
    except TimeoutError:
        raise GatewayError(
            408,
            f"the request body was not received within {settings.body_timeout_s:g}s",
            kind="invalid_request_error",
            code="request_timeout",
        ) from None
    try:
        return decoder.decode(body)
    except RecursionError:  # msgspec's bound on nesting: a malformed body like any other
        raise msgspec.DecodeError("the body is nested too deeply") from None


def json_response(body: msgspec.Struct, status: int = 200) -> web.Response:
    return web.Response(body=encode(body), status=status, content_type="application/json")
