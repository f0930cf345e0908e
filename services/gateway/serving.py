"""The gateway's endpoints as functions of a key and a typed request (services/gateway/protocol.py): each returns its
response struct or, for a stream, an async generator of chunk structs. No HTTP here (services/gateway/routes.py),
no error responses (services/gateway/errors.py): a refusal is a raised ``GatewayError``.

Every refusal is decided before a task starts: a client gets a clean HTTP error, or a 200 whose stream ends with
the answer or an in-stream error event.

A stream opens with the assistant role, carries (only when the client asked with ``conductor_progress``) one extra
chunk per progress event, then the answer in word-aligned pieces and a final chunk with ``finish_reason``, usage
(tokens, $, calls) and the Conductor's view of the task. Keep-alives are the transport's (services/gateway/stream.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator

from schemas.solve import ProgressEvent, SolveRequest
from services.gateway.bus import Bus
from services.gateway.calls import Call, Calls, in_flight, owns
from services.gateway.errors import GatewayError
from services.gateway.keys import ApiKey
from services.gateway.protocol import (
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ModelCard,
    ModelList,
)
from services.gateway.translation import CONDUCTOR_MODEL, Chunks, completion, model_list, solve_request

Events = asyncio.Queue[ProgressEvent]


class Serving:
    def __init__(self, calls: Calls, bus: Bus, workers: list[str]) -> None:
        self.calls = calls
        self.bus = bus
        self.workers = workers

    async def chat(
        self, key: ApiKey, req: ChatCompletionRequest
    ) -> ChatCompletionResponse | AsyncGenerator[ChatCompletionChunk, None]:
        """``POST /v1/chat/completions``. The request is checked here, before a stream opens; a stream's admission
        runs before its first chunk, so its refusal (a 429) is still a plain HTTP error."""
        solve = solve_request(req, self.workers, self.calls.task_id(key))
        if req.stream:
            return self._stream(key, req, solve)
        created = int(time.time())
        solve, hold = await self.calls.admit(key, solve)
        call = self.calls.start(key, solve, hold, req.durable)
        with in_flight():
            result = await call.result()
        return completion(result, req.model, created)

    async def _stream(
        self, key: ApiKey, req: ChatCompletionRequest, solve: SolveRequest
    ) -> AsyncGenerator[ChatCompletionChunk, None]:
        chunks = Chunks(solve.task_id or "", req.model, int(time.time()))
        async with self._progress(solve) as events:  # subscribed before the task starts: no event is missed
            solve, hold = await self.calls.admit(key, solve)
            call = self.calls.start(key, solve, hold, req.durable)
            try:
                with in_flight():
                    yield chunks.role()
                    async for event in _until_done(call, events):
                        yield chunks.progress(event)
                    result = await call.result()
            except (asyncio.CancelledError, GeneratorExit):  # the stream was closed: the client went away
                call.hang_up()
                raise
        include_usage = req.stream_options is not None and req.stream_options.include_usage
        for chunk in chunks.result(result, include_usage):
            yield chunk

    def _progress(self, solve: SolveRequest) -> contextlib.AbstractAsyncContextManager[Events | None]:
        if solve.progress and solve.task_id:
            return self.bus.progress(solve.task_id)
        return contextlib.nullcontext()

    def models(self) -> ModelList:
        """``GET /v1/models``: the Conductor, the advertised baselines and every pool worker."""
        return ModelList(data=model_list(self.workers))

    def model(self, name: str) -> ModelCard:
        """``GET /v1/models/{model}``."""
        if name not in {card.id for card in model_list(self.workers)}:
            raise GatewayError(
                404,
                f"the model {name!r} does not exist",
                kind="invalid_request_error",
                code="model_not_found",
            )
        return ModelCard(id=name)

    async def task(self, key: ApiKey, task_id: str) -> ChatCompletionResponse:
        """``GET /v1/conductor/tasks/{task_id}``: a durable task's stored result, for the key that made it only."""
        if not owns(key, task_id):
            raise GatewayError(
                404, f"no task {task_id} for this key", kind="invalid_request_error", code="task_not_found"
            )
        result = await self.bus.result(task_id, wait=0.0, key=key.name)
        return completion(result, CONDUCTOR_MODEL, int(time.time()))


async def _until_done(call: Call, events: Events | None) -> AsyncIterator[ProgressEvent]:
    """The task's progress events as they arrive, until its result is in (none without a subscription)."""
    while events is not None and not call.task.done():
        getter = asyncio.ensure_future(events.get())
        try:
            await asyncio.wait({call.task, getter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            getter.cancel()
        if getter.done() and not getter.cancelled():
            yield getter.result()
