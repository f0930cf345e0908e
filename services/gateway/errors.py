"""The gateway's one error type, and the one place every failure becomes OpenAI's error shape.

Code anywhere in the gateway raises ``GatewayError`` (a refusal with its HTTP status and OpenAI's error fields) and
never builds an error response itself. ``classify`` turns any failure into one: our own errors as they are,
aiohttp's HTTP exceptions (404, 405, 413, ...) by their status, a request body that does not decode as a 400 naming
the field, anything else (a bug) as a 500 logged once with its traceback and never sent. ``openai_errors`` (the
app's middleware) answers with it; a stream that already began sends it as its last event (routes.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
import structlog
from aiohttp import web

from conductor.wire import field_of
from schemas.errors import ErrorCode, ErrorInfo
from services.gateway.protocol import ErrorBody, ErrorResponse, encode

log = structlog.get_logger("conductor.gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class GatewayError(Exception):
    """A request the gateway refuses, with its HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str,
        code: str,
        param: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def response(self) -> ErrorResponse:
        return ErrorResponse(
            error=ErrorBody(message=self.message, type=self.kind, param=self.param, code=self.code)
        )


def bad_request(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, kind="invalid_request_error", code=code, param=param)


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413,
        f"request body over the limit of {limit} bytes",
        kind="invalid_request_error",
        code="payload_too_large",
    )


_STATUS: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.BAD_REQUEST: (400, "invalid_request_error"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "invalid_request_error"),
    ErrorCode.BUDGET_EXCEEDED: (422, "budget_exceeded"),
    ErrorCode.UNAVAILABLE: (503, "service_unavailable"),
    # A deadline (not retryable): the task was stopped at the gateway's solve timeout, and running it again would
    # stop there again. A retryable timeout (a worker's) is a 503 below.
    ErrorCode.TIMEOUT: (504, "timeout"),
    ErrorCode.WORKER_ERROR: (502, "upstream_error"),
    ErrorCode.PLANNER_ERROR: (502, "upstream_error"),
    ErrorCode.FORMAT_ERROR: (502, "upstream_error"),
    ErrorCode.VERIFIER_ERROR: (502, "upstream_error"),
    ErrorCode.SKIPPED: (502, "upstream_error"),
    ErrorCode.CANCELLED: (409, "cancelled"),  # a durable task fetched after its client hung up (calls.py)
    ErrorCode.INTERNAL: (500, "server_error"),
}
RETRY_AFTER_S = 1


def error_from(info: ErrorInfo) -> GatewayError:
    """A solve API error as an HTTP error; retryable ones are 503 with Retry-After (the SDKs retry those)."""
    status, kind = _STATUS.get(info.code, (500, "server_error"))
    if info.retryable and (status < 500 or info.code == ErrorCode.TIMEOUT):
        status, kind = 503, "service_unavailable"
    return GatewayError(
        status,
        info.message,
        kind=kind,
        code=str(info.code),
        param=info.field,
        retry_after=RETRY_AFTER_S if status == 503 else None,
    )


_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "payload_too_large"}


def classify(exc: BaseException, request: web.Request) -> GatewayError | None:
    """``exc`` as the error a client is sent; None for what is not a failure (an aiohttp redirect) or not this
    layer's to answer (a cancellation: the client hung up, nothing can be sent)."""
    match exc:
        case GatewayError():
            return exc
        case web.HTTPException() if exc.status < 400:
            return None
        case web.HTTPException():
            code = _HTTP_CODES.get(exc.status, "http_error")
            detail = exc.text if exc.status == 413 and exc.text else exc.reason  # 413's text names the limit
            return GatewayError(
                exc.status,
                f"{request.method} {request.path}: {detail}",
                kind="invalid_request_error",
                code=code,
            )
        case msgspec.ValidationError():  # a body of the wrong shape (protocol.py): the field at fault
            return bad_request(f"invalid request: {exc}", field_of(exc))
        case msgspec.DecodeError():  # only request bodies are decoded unchecked here: the bus checks its own
            return bad_request(f"the body is not valid JSON: {exc}", code="invalid_json")
        case Exception():
            log.error("gateway handler failed", path=request.path, exc_info=exc)
            return GatewayError(
                500, "the gateway failed on this request", kind="server_error", code="internal_error"
            )
    return None


def error_response(exc: GatewayError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    body = encode(exc.response())
    return web.Response(body=body, status=exc.status, headers=headers, content_type="application/json")


@web.middleware
async def openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure of every route in OpenAI's error shape with its status (issue 19, item 7; issue 21, item 2)."""
    try:
        return await handler(request)
    except Exception as exc:
        error = classify(exc, request)
        if error is None:
            raise
        return error_response(error)
