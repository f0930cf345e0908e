"""The HTTP routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /v1/conductor/tasks/{id}``.

Every refusal is OpenAI's error shape with the right status, decided before a task starts: a client either gets a
clean HTTP error or a 200 whose stream ends with the answer or an in-stream error event (what OpenAI's SDKs raise
as ``APIError``). Streaming lives in services/gateway/stream.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import msgspec
import structlog
from aiohttp import web

from conductor import metrics
from conductor.wire import field_of
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import Budget, SolveRequest, SolveResult
from services.gateway.bus import Bus
from services.gateway.config import GatewaySettings
from services.gateway.keys import ApiKey, KeyRing
from services.gateway.openai_api import (
    BASELINE_MODELS,
    CONDUCTOR_MODEL,
    ChatCompletionRequest,
    GatewayError,
    bad_request,
    completion_body,
    error_from,
    solve_request,
)
from services.gateway.quota import Hold, Quotas

ANONYMOUS = ApiKey(name="anonymous", sha256="0" * 64)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLIENT_CLOSED = 499
"""The status a request the client hung up on is counted under (nginx's convention); it is never sent."""
log = structlog.get_logger("conductor.gateway")
_dec = msgspec.json.Decoder(ChatCompletionRequest)


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure in OpenAI's error shape, in one place (issue 19, item 7): a refusal (``GatewayError``),
    aiohttp's own 404/405/413 and the like, and a bug (500, logged once with its traceback, never sent)."""
    try:
        return await handler(request)
    except GatewayError as exc:
        return error_response(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status, "http_error")
        return error_response(GatewayError(exc.status, f"{request.method} {request.path}: {exc.reason}",
                                           kind="invalid_request_error", code=code))  # fmt: skip
    except Exception:
        log.exception("gateway handler failed", path=request.path)
        return error_response(GatewayError(500, "the gateway failed on this request", kind="server_error",
                                           code="internal_error"))  # fmt: skip


def error_response(exc: GatewayError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return web.json_response(exc.body(), status=exc.status, headers=headers)


class Door:
    """Everything a request needs: settings, keys, quotas, the bus and the pool's worker names."""

    def __init__(
        self, settings: GatewaySettings, keys: KeyRing | None, quotas: Quotas | None, bus: Bus, workers: list[str]
    ) -> None:
        self.settings = settings
        self.keys = keys
        self.quotas = quotas
        self.bus = bus
        self.workers = workers
        self._running: set[asyncio.Task[SolveResult]] = set()  # calls in flight, settled when they end

    def authenticate(self, request: web.Request) -> ApiKey:
        if self.keys is None:
            return ANONYMOUS
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise GatewayError(
                401, "missing API key: send 'Authorization: Bearer <key>'", kind="invalid_request_error", code="missing_api_key"
            )
        if not token.isascii() or not token.strip().isprintable():  # a key is printable ASCII; anything else is not one
            raise GatewayError(401, "invalid API key", kind="invalid_request_error", code="invalid_api_key")
        key = self.keys.lookup(token.strip())
        if key is None:
            raise GatewayError(401, "invalid API key", kind="invalid_request_error", code="invalid_api_key")
        return key

    async def read(self, request: web.Request) -> ChatCompletionRequest:
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)  # refused from the header, before a byte of the body is read
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                body = await request.read()  # aiohttp stops reading at client_max_size (chunked bodies too)
        except web.HTTPRequestEntityTooLarge as exc:
            raise too_large(limit) from exc
        except TimeoutError:
            raise GatewayError(408, f"the request body was not received within {self.settings.body_timeout_s:g}s",
                               kind="invalid_request_error", code="request_timeout") from None  # fmt: skip
        try:
            return _dec.decode(body)
        except RecursionError:
            raise bad_request("the body is nested too deeply", code="invalid_json") from None
        except msgspec.ValidationError as exc:
            raise bad_request(f"invalid request: {exc}", field_of(exc)) from exc
        except msgspec.DecodeError as exc:
            raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from exc

    async def admit(self, key: ApiKey, solve: SolveRequest) -> tuple[SolveRequest, Hold | None]:
        """Count the request against the key's limits and reserve its spend (services/gateway/quota.py); the
        request with that reservation as its budget, and the hold to settle."""
        hold = None
        if key.spend_usd_per_day is not None or key.max_in_flight is not None:
            usd = key.reserve_usd or self.settings.reserve_usd
            hold = Hold(id=uuid.uuid4().hex, usd=usd, expires=time.time() + self.settings.solve_timeout_s + 60)
        if self.quotas is not None:
            await self.quotas.admit(key, hold)
        if hold is not None and key.spend_usd_per_day is not None:
            limit = hold.usd if solve.budget is None or solve.budget.max_cost_usd is None else min(
                hold.usd, solve.budget.max_cost_usd)  # fmt: skip
            budget = msgspec.structs.replace(solve.budget or Budget(), max_cost_usd=limit)
            solve = msgspec.structs.replace(solve, budget=budget)
        return solve, hold

    def start(self, key: ApiKey, solve: SolveRequest, hold: Hold | None, durable: bool) -> asyncio.Task[SolveResult]:
        """The task's call, settled exactly once whatever becomes of the HTTP request (issue 19, item 3): charged
        with what it cost when its result comes, the hold released when it fails. The call is never cancelled by a
        hung-up client (callers ``shield`` it): the task runs on and is paid for, so hanging up spends nothing free."""

        async def call() -> SolveResult:
            run = self.bus.solve_durable if durable else self.bus.solve
            try:
                result = await run(solve, self.settings.solve_timeout_s)
            except BaseException:
                await self.settle(key, hold, None)
                raise
            await self.settle(key, hold, result)
            return result

        task = asyncio.create_task(call())
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def settle(self, key: ApiKey, hold: Hold | None, result: SolveResult | None) -> None:
        if result is not None:
            metrics.gateway_usage(key.name, result.usage.total)
        if self.quotas is None:
            return
        try:
            await self.quotas.charge(key, result.usage.total.cost_usd if result is not None else 0.0, hold)
        except GatewayError as exc:  # the record stayed contended: the hold expires on its own
            log.error("spend not settled", key=key.name, error=exc.message,
                      cost_usd=result.usage.total.cost_usd if result is not None else 0.0)  # fmt: skip

    def task_id(self, key: ApiKey) -> str:
        """Task ids carry a tag of the key that made them, so a key can fetch only its own durable tasks."""
        return f"gw{key.sha256[:12]}-{uuid.uuid4().hex}"


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"request body over the limit of {limit} bytes", kind="invalid_request_error", code="payload_too_large"
    )


NO_ANSWER = ErrorInfo(code=ErrorCode.INTERNAL, message="the task ended without an answer")


def answer_or_error(result: SolveResult) -> SolveResult:
    if result.answer is None:
        raise error_from(result.error or NO_ANSWER)
    return result


def routes(door: Door, stream_handler: Callable[..., Awaitable[web.StreamResponse]]) -> list[web.RouteDef]:
    async def chat(request: web.Request) -> web.StreamResponse:
        key, status, streamed = ANONYMOUS, 500, False
        try:
            key = door.authenticate(request)
            req = await door.read(request)
            streamed = req.stream
            solve, hold = await door.admit(key, solve_request(req, door.workers, door.task_id(key)))
            if req.stream:
                response = await stream_handler(request, door, key, req, solve, hold)
                status = response.status
                return response
            started = int(time.time())
            metrics.GATEWAY_IN_FLIGHT.inc()
            try:
                result = await asyncio.shield(door.start(key, solve, hold, req.durable))  # a hang-up leaves it running
            finally:
                metrics.GATEWAY_IN_FLIGHT.dec()
            status = 200
            return web.json_response(completion_body(answer_or_error(result), req.model, started))
        except GatewayError as exc:
            status = exc.status
            return error_response(exc)
        except asyncio.CancelledError:
            status = CLIENT_CLOSED  # the client hung up: not a server error
            raise
        finally:
            metrics.gateway_request(key.name, status, streamed)

    async def models(request: web.Request) -> web.Response:
        door.authenticate(request)  # refusals become OpenAI's error shape in ``openai_errors``
        ids = [CONDUCTOR_MODEL, *BASELINE_MODELS, *door.workers]
        return web.json_response({"object": "list", "data": [model_card(i) for i in ids]})

    async def model(request: web.Request) -> web.Response:
        door.authenticate(request)
        name = request.match_info["model"]
        if name not in {CONDUCTOR_MODEL, *BASELINE_MODELS, *door.workers}:
            raise GatewayError(404, f"the model {name!r} does not exist", kind="invalid_request_error", code="model_not_found")
        return web.json_response(model_card(name))

    async def task(request: web.Request) -> web.Response:
        key = door.authenticate(request)
        task_id = request.match_info["task_id"]
        if not task_id.startswith(f"gw{key.sha256[:12]}-"):
            raise GatewayError(404, f"no task {task_id} for this key", kind="invalid_request_error", code="task_not_found")
        result = await door.bus.result(task_id, wait=0.0)
        return web.json_response(completion_body(answer_or_error(result), CONDUCTOR_MODEL))

    return [
        web.post("/v1/chat/completions", chat),
        web.get("/v1/models", models),
        web.get("/v1/models/{model}", model),
        web.get("/v1/conductor/tasks/{task_id}", task),
    ]


def model_card(model_id: str) -> dict[str, object]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "conductor"}

