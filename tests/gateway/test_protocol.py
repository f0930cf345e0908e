"""The gateway's pieces without a server (issue 21, item 2): every failure classified into OpenAI's error shape in
one place, the chunks of a streamed task, and keep-alive as a wrapper around any stream."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import SolveResult
from schemas.usage import Usage, UsageSummary
from services.gateway.errors import GatewayError, classify
from services.gateway.protocol import ChatCompletionRequest, encode
from services.gateway.stream import KEEPALIVE, keepalive
from services.gateway.translation import Chunks

REQUEST = make_mocked_request("POST", "/v1/chat/completions")


def _decode_error(body: bytes) -> Exception:
    try:
        msgspec.json.decode(body, type=ChatCompletionRequest)
    except msgspec.DecodeError as exc:
        return exc
    raise AssertionError("decoded")


@pytest.mark.parametrize(
    ("exc", "status", "code", "param"),
    [
        (
            GatewayError(429, "slow down", kind="rate_limit_error", code="rate_limit_exceeded"),
            429,
            "rate_limit_exceeded",
            None,
        ),
        (web.HTTPNotFound(), 404, "not_found", None),
        (web.HTTPMethodNotAllowed("PUT", ["POST"]), 405, "method_not_allowed", None),
        (web.HTTPRequestEntityTooLarge(max_size=10, actual_size=11), 413, "payload_too_large", None),
        (_decode_error(b"{not json"), 400, "invalid_json", None),
        (
            _decode_error(b'{"model": "m", "messages": [{"role": "wizard"}]}'),
            400,
            "invalid_request",
            "messages[0].role",
        ),
        (RuntimeError("secret detail"), 500, "internal_error", None),
    ],
)
def test_every_failure_is_classified_into_the_error_shape(exc, status, code, param):
    error = classify(exc, REQUEST)
    assert error is not None and (error.status, error.code, error.param) == (status, code, param)
    body = msgspec.json.decode(encode(error.response()))
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "secret detail" not in body["error"]["message"]  # a bug is logged, never sent


def test_a_redirect_is_not_an_error():
    assert classify(web.HTTPFound("/elsewhere"), REQUEST) is None


def _result(answer: str | None, error: ErrorInfo | None = None) -> SolveResult:
    usage = UsageSummary(total=Usage(input_tokens=3, output_tokens=4, cost_usd=0.5, calls=2))
    return SolveResult(task_id="t", answer=answer, usage=usage, error=error)


def test_a_stream_is_role_answer_pieces_then_finish_with_usage_once():
    chunks = Chunks("t", "conductor", 7)
    role = msgspec.to_builtins(chunks.role())
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""} and "usage" not in role
    body = [msgspec.to_builtins(c) for c in chunks.result(_result("word " * 30), include_usage=False)]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in body) == "word " * 30
    assert body[-1]["choices"][0]["finish_reason"] == "stop" and body[-1]["usage"]["calls"] == 2
    assert all("usage" not in c for c in body[:-1]) and {c["id"] for c in body} == {"chatcmpl-t"}
    separate = [msgspec.to_builtins(c) for c in chunks.result(_result("ok"), include_usage=True)]
    assert (
        "usage" not in separate[-2]
        and separate[-1]["choices"] == []
        and separate[-1]["usage"]["cost_usd"] == 0.5
    )


def test_a_task_without_an_answer_streams_its_error():
    down = ErrorInfo(code=ErrorCode.WORKER_ERROR, message="provider down")
    with pytest.raises(GatewayError) as err:
        list(Chunks("t", "conductor", 7).result(_result(None, down), include_usage=False))
    assert (err.value.status, err.value.code) == (502, "worker_error")


async def test_keepalive_fills_silence_and_passes_items_through():
    async def slow():
        yield 1
        await asyncio.sleep(0.25)
        yield 2

    got = [item async for item in keepalive(slow(), 0.1)]
    assert got[0] == 1 and got[-1] == 2 and got.count(KEEPALIVE) >= 1 and len(got) == 2 + got.count(KEEPALIVE)


async def test_closing_keepalive_cancels_the_wait_inside_the_stream():
    """A client that goes away closes the stream: the wrapped generator sees the cancellation where it waits (the
    serving code notices the hang-up there) and its cleanup runs."""
    seen: list[str] = []

    async def waiting():
        try:
            yield "first"
            await asyncio.sleep(30)
            yield "never"
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            seen.append("cleaned up")

    stream = keepalive(waiting(), 0.05)
    assert await anext(stream) == "first"
    assert await anext(stream) is KEEPALIVE  # the second read is pending inside the stream
    await stream.aclose()
    assert seen == ["cancelled", "cleaned up"]
