"""A scripted HTTP server (stdlib, in a thread) speaking just enough of the OpenAI and Anthropic wire formats.

Each POST takes the next scripted ``Reply`` (status, JSON body, headers, delay before answering) and is recorded
with its arrival time, so tests can check what the real SDKs sent and how long the adapter waited between tries.
A script entry may also be a function of the request's JSON body returning the ``Reply`` (a server that decides,
like ``vllm_context``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import MappingProxyType
from typing import Any, NamedTuple


class Reply(NamedTuple):
    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = MappingProxyType({})
    delay_s: float = 0.0


class Seen(NamedTuple):
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


def openai_ok(
    text: str = "Final answer: 42",
    *,
    prompt: int = 11,
    completion: int = 7,
    model: str = "gpt-x",
    delay_s: float = 0.0,
) -> Reply:
    return Reply(
        200,
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        },
        delay_s=delay_s,
    )


def openai_error(status: int, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> Reply:
    body = {"error": {"message": f"scripted {status}", "type": "scripted", "param": None, "code": None}}
    return Reply(status, body, headers or {}, delay_s)


def anthropic_ok(
    text: str = "Answer: B",
    *,
    input_tokens: int = 20,
    output_tokens: int = 9,
    cache_read: int = 5,
    delay_s: float = 0.0,
) -> Reply:
    return Reply(
        200,
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": text},
            ],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cache_read_input_tokens": cache_read,
                "cache_creation_input_tokens": 0,
            },
        },
        delay_s=delay_s,
    )


def anthropic_error(status: int, headers: dict[str, str] | None = None, delay_s: float = 0.0) -> Reply:
    body = {"type": "error", "error": {"type": "scripted_error", "message": f"scripted {status}"}}
    return Reply(status, body, headers or {}, delay_s)


def vllm_context(context: int, chars_per_token: int = 4) -> Callable[[dict[str, Any]], Reply]:
    """vLLM's answer for a model served with ``context`` tokens: its 400 refusals (worded as vLLM words them) when
    the prompt, or the prompt and ``max_tokens``, do not fit; else a completion. Prompt tokens are counted as
    ``chars_per_token`` characters each."""

    def answer(body: dict[str, Any]) -> Reply:
        prompt = sum(len(m["content"]) for m in body["messages"]) // chars_per_token + 1
        wanted = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        if prompt >= context:
            message = (
                f"This model's maximum context length is {context} tokens. However, your request has "
                f"{prompt} input tokens. Please reduce the length of the input messages."
            )
        elif wanted > context - prompt:
            message = (
                f"'max_tokens' or 'max_completion_tokens' is too large: {wanted}. This model's maximum "
                f"context length is {context} tokens and your request has {prompt} input tokens "
                f"({wanted} > {context} - {prompt})."
            )
        else:
            return openai_ok(prompt=prompt, completion=min(wanted, 7))
        body = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
        return Reply(400, body)

    return answer


class FakeAPI:
    def __init__(self, script: list[Reply | Callable[[dict[str, Any]], Reply]], port: int = 0) -> None:
        self.script = list(script)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                body = json.loads(raw or b"{}")
                with api._lock:
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    api.seen.append(Seen(self.path, headers, body, time.monotonic()))
                    reply = api.script.pop(0) if api.script else openai_error(599)
                if callable(reply):
                    reply = reply(body)
                time.sleep(reply.delay_s)
                payload = json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    for k, v in {"content-type": "application/json", **reply.headers}.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def vllm_clamping_context(context: int, chars_per_token: int = 4) -> Callable[[dict[str, Any]], Reply]:
    """vLLM 0.32's answer (as its renderer words it): only a ``max_tokens`` above the whole context is refused,
    naming no prompt size, and any other is cut to what the prompt leaves; a prompt over the context is counted
    only to one token past it ("at least 2049 input tokens")."""

    def answer(body: dict[str, Any]) -> Reply:
        prompt = sum(len(m["content"]) for m in body["messages"]) // chars_per_token + 1
        param = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        wanted = body.get(param) or 16
        if wanted > context:
            message = (
                f"{param}={wanted} cannot be greater than max_model_len={context}. Please request fewer "
                f"output tokens. (parameter={param}, value={wanted})"
            )
        elif prompt > context:
            message = (
                f"This model's maximum context length is {context} tokens. However, your prompt contains at "
                f"least {context + 1} input tokens, which exceeds this limit even without any output tokens. "
                f"Please reduce the length of the input prompt. (parameter=input_tokens, value={context + 1})"
            )
        else:
            return openai_ok(prompt=prompt, completion=min(wanted, context - prompt, 7))
        body = {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
        return Reply(400, body)

    return answer
