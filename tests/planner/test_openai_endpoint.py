"""The OpenAI-compatible policy through the real ``openai`` SDK against a local Chat Completions server."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.openai_endpoint import OpenAIEndpointPolicy
from services.planner.policy import PolicyError
from tests.planner.samples import GOOD, request

MESSAGES = [ChatMessage(role="system", content="rules"), ChatMessage(role="user", content="question")]


def completion(*texts: str, finish: str = "stop") -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "conductor-7b",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": t},
                "finish_reason": finish,
                "logprobs": None,
            }
            for i, t in enumerate(texts)
        ],
        "usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366},
    }


class FakeEndpoint:
    """Replies from a queue of (status, body, headers, delay_s); records each request's JSON body."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict, dict[str, str], float]] = []
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # GET /v1/models, as a start-up check asks it: the one model it serves
                models = {
                    "object": "list",
                    "data": [{"id": "conductor-7b", "object": "model", "created": 0, "owned_by": "test"}],
                }
                data = json.dumps(models).encode() if self.path.endswith("/models") else b"{}"
                self.send_response(200 if self.path.endswith("/models") else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), **body}
                )
                status, payload, headers, delay = endpoint.replies.pop(0)
                time.sleep(delay)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out on purpose

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"

    def reply(
        self, body: dict, status: int = 200, headers: dict[str, str] | None = None, delay: float = 0
    ) -> None:
        self.replies.append((status, body, headers or {}, delay))


def policy(ep: FakeEndpoint, **kw: object) -> OpenAIEndpointPolicy:
    args: dict[str, object] = {
        "model": "conductor-7b",
        "base_url": ep.url,
        "api_key": "sk-test",
        "max_retries": 0,
    }
    args.update(kw)
    return OpenAIEndpointPolicy(**args)  # type: ignore[arg-type]


async def test_sample_sends_chat_completions_and_reads_usage(endpoint: FakeEndpoint) -> None:
    endpoint.reply(completion("plan text"))
    p = policy(endpoint)
    [sample] = await p.sample(MESSAGES, n=1, temperature=1.0, max_tokens=1024)
    await p.aclose()
    assert sample.text == "plan text" and not sample.truncated
    assert sample.usage == Usage(input_tokens=321, output_tokens=45, calls=1)
    sent = endpoint.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert (
        sent["model"] == "conductor-7b"
        and sent["max_completion_tokens"] == 1024
        and sent["temperature"] == 1.0
    )
    assert sent["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "question"},
    ]
    assert "n" not in sent


async def test_several_samples_share_one_usage(endpoint: FakeEndpoint) -> None:
    endpoint.reply(completion("a", "b", "c", finish="length"))
    p = policy(endpoint)
    samples = await p.sample(MESSAGES, n=3, temperature=1.0, max_tokens=8)
    await p.aclose()
    assert [s.text for s in samples] == ["a", "b", "c"] and all(s.truncated for s in samples)
    assert sum((s.usage for s in samples), Usage()) == Usage(input_tokens=321, output_tokens=45, calls=1)
    assert endpoint.requests[0]["n"] == 3


@pytest.mark.parametrize(
    ("status", "retryable"), [(429, True), (500, True), (503, True), (400, False), (401, False), (404, False)]
)
async def test_http_errors_map_to_policy_errors(endpoint: FakeEndpoint, status: int, retryable: bool) -> None:
    endpoint.reply({"error": {"message": "nope", "type": "x"}}, status=status)
    p = policy(endpoint)
    with pytest.raises(PolicyError) as info:
        await p.sample(MESSAGES, n=1, temperature=1.0, max_tokens=16)
    await p.aclose()
    assert info.value.retryable is retryable and str(status) in str(info.value)


async def test_sdk_retries_honour_retry_after_then_succeed(endpoint: FakeEndpoint) -> None:
    endpoint.reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "0"})
    endpoint.reply(completion("ok"))
    p = policy(endpoint, max_retries=1)
    [sample] = await p.sample(MESSAGES, n=1, temperature=1.0, max_tokens=16)
    await p.aclose()
    assert sample.text == "ok" and len(endpoint.requests) == 2


async def test_timeout_is_retryable(endpoint: FakeEndpoint) -> None:
    endpoint.reply(completion("late"), delay=1.0)
    p = policy(endpoint, timeout_s=0.2)
    with pytest.raises(PolicyError) as info:
        await p.sample(MESSAGES, n=1, temperature=1.0, max_tokens=16)
    await p.aclose()
    assert info.value.retryable


async def test_unreachable_endpoint_is_retryable() -> None:
    p = OpenAIEndpointPolicy(
        model="m", base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0, timeout_s=2
    )
    with pytest.raises(PolicyError) as info:
        await p.sample(MESSAGES, n=1, temperature=1.0, max_tokens=16)
    await p.aclose()
    assert info.value.retryable


async def test_planner_over_the_endpoint_resamples_then_parses(endpoint: FakeEndpoint, cards) -> None:
    endpoint.reply(completion("Let me think... I cannot decide."))
    endpoint.reply(completion(GOOD))
    p = policy(endpoint)
    reply = await Planner(PlannerSettings(policy="openai:conductor-7b"), p).plan(request(cards))
    await p.aclose()
    assert reply.workflow.model_id == [1, 3] and reply.attempts == 2
    assert reply.usage == Usage(input_tokens=642, output_tokens=90, calls=2)
    assert "Models available to you" in endpoint.requests[0]["messages"][1]["content"]


async def test_a_completion_cut_off_at_max_tokens_says_so(endpoint: FakeEndpoint, cards) -> None:
    endpoint.reply(completion("Plan: ask Model 1.\nmodel_id = [1]\nsubtasks = [", finish="length"))
    p = policy(endpoint)
    settings = PlannerSettings(policy="openai:conductor-7b", resamples=0, fallback=None)
    reply = await Planner(settings, p).plan(request(cards))
    await p.aclose()
    assert reply.format_failures[0].endswith("(cut off at max_tokens)")
