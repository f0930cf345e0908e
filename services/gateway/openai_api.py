"""OpenAI chat-completions on the wire, translated to and from the solve API: pure functions, no I/O.

What a client sends is OpenAI's request body; the Conductor-only options (pool, recursion rounds, budget, domain,
durable, progress) ride in the same body as extra top-level fields, which is where the OpenAI SDKs put
``extra_body``. Sampling parameters (temperature, top_p, max_tokens, ...) are accepted and not forwarded: the
Conductor writes each worker's instruction and the pool file fixes each worker's sampling. Features a Conductor
cannot honour (several choices, tool calls, forced JSON) are refused with a 400 naming the field, never ignored.
"""

from __future__ import annotations

import time
from typing import Literal

import msgspec

from conductor.strategy import StrategyError, parse_strategy
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import Budget, SolveRequest, SolveResult
from schemas.usage import Usage

CONDUCTOR_MODEL = "conductor"
BASELINE_MODELS = ("moa", "refine:5", "consensus:5")
"""Advertised by ``GET /v1/models``; any name of the strategy grammar is accepted (``refine:3``, ``moa:4+r1``...)."""


class ContentPart(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    text: str | None = None


class ChatMessageIn(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct, frozen=True, kw_only=True):
    include_usage: bool = False


class ResponseFormat(msgspec.Struct, frozen=True, kw_only=True):
    type: str


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Only read to refuse it: the Conductor does not make tool calls."""

    type: str = "function"


class ChatCompletionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The subset of OpenAI's body the gateway reads; unknown fields are ignored, as OpenAI-compatible servers do."""

    model: str
    messages: list[ChatMessageIn]
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    tools: list[ToolSpec] | None = None
    functions: list[ToolSpec] | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None
    # Conductor options (extra_body)
    pool: list[str] | None = None
    max_rounds: int = 0
    max_steps: int | None = None
    budget: Budget | None = None
    domain: str | None = None
    cache: bool = False
    durable: bool = False
    conductor_progress: bool = False  # stream progress events as extra chunks (choices: [], a `conductor` field)


class GatewayError(Exception):
    """A request the gateway refuses, with its HTTP status and OpenAI error fields."""

    def __init__(
        self, status: int, message: str, *, kind: str, code: str, param: str | None = None, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def body(self) -> dict[str, object]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, kind="invalid_request_error", code=code, param=param)


class Strategy(msgspec.Struct, frozen=True, kw_only=True):
    """What ``model`` chose: the planner policy and, for a pool worker by name, a one-worker pool."""

    policy: str | None
    pool: list[str] | None = None
    max_steps: int | None = None  # what the strategy needs (moa: K + 1); None: the request's
    max_rounds: int | None = None  # a name's +rN; None: the request's


def strategy_for(model: str, worker_names: list[str]) -> Strategy:
    """``conductor``, a pool worker's name (that worker alone, on a pool of itself), or any name of the one strategy
    grammar (conductor/strategy.py): ``moa`` here is the ``moa`` of `conductor eval` and of the CLI."""
    if model == CONDUCTOR_MODEL:
        return Strategy(policy=None)
    if model in worker_names:
        return Strategy(policy="single", pool=[model])
    try:
        named = parse_strategy(model, worker_names)
    except StrategyError as exc:
        raise GatewayError(
            404,
            f"the model {model!r} does not exist: use 'conductor', a pool worker's name (GET /v1/models) or a "
            f"strategy ({exc})",
            kind="invalid_request_error",
            code="model_not_found",
            param="model",
        ) from None
    return Strategy(policy=named.policy, max_steps=named.max_steps, max_rounds=named.max_rounds or None)


def _text(msg: ChatMessageIn, index: int) -> str:
    if msg.content is None:
        return ""
    if isinstance(msg.content, str):
        return msg.content
    parts = []
    for j, part in enumerate(msg.content):
        if part.type != "text" or part.text is None:
            raise bad_request(f"only text content parts are supported, got {part.type!r}", f"messages[{index}].content[{j}]")
        parts.append(part.text)
    return "\n".join(parts)


def question_of(messages: list[ChatMessageIn]) -> str:
    """The conversation as one question: instructions first, earlier turns as a transcript, the last user turn.

    A Conductor answers one question; a chat is folded into it so workers see everything the user said. The last
    message must be the user's: there is nothing to answer otherwise.
    """
    if not messages:
        raise bad_request("messages must not be empty", "messages")
    last = len(messages) - 1
    if messages[last].role != "user":
        raise bad_request("the last message must have role 'user'", f"messages[{last}].role")
    texts = [_text(m, i) for i, m in enumerate(messages)]
    current = texts[last].strip()
    if not current:
        raise bad_request("the last user message is empty", f"messages[{last}].content")
    instructions = [t for m, t in zip(messages, texts, strict=True) if m.role in ("system", "developer") and t.strip()]
    turns = [
        f"{m.role.capitalize()}: {t}"
        for m, t in zip(messages[:last], texts[:last], strict=True)
        if m.role in ("user", "assistant", "tool") and t.strip()
    ]
    sections = []
    if instructions:
        sections.append("Instructions:\n" + "\n\n".join(instructions))
    if turns:
        sections.append("Conversation so far:\n" + "\n".join(turns))
    if not sections:
        return current
    sections.append("Current request:\n" + current)
    return "\n\n".join(sections)


def solve_request(req: ChatCompletionRequest, worker_names: list[str], task_id: str) -> SolveRequest:
    """Validate what a Conductor cannot honour, then build the solve request."""
    if req.n != 1:
        raise bad_request("only n=1 is supported: a Conductor returns one answer", "n")
    if req.tools is not None or req.functions is not None:
        raise bad_request("tool calls are not supported by the Conductor", "tools" if req.tools is not None else "functions")
    if req.response_format is not None and req.response_format.type != "text":
        raise bad_request("only response_format type 'text' is supported", "response_format.type")
    if req.max_rounds < 0:
        raise bad_request("max_rounds must be >= 0", "max_rounds")
    strategy = strategy_for(req.model, req.pool or worker_names)  # ordinals of the request's pool
    pool = req.pool
    if strategy.pool is not None:
        if pool is not None and req.model not in pool:
            raise bad_request(f"pool does not contain the requested worker {req.model!r}", "pool")
        pool = strategy.pool
    return SolveRequest(
        question=question_of(req.messages),
        task_id=task_id,
        pool=pool,
        max_steps=strategy.max_steps or req.max_steps,
        max_rounds=req.max_rounds if strategy.max_rounds is None else strategy.max_rounds,
        domain=req.domain,
        policy=strategy.policy,
        budget=req.budget,
        cache=req.cache,
        progress=req.stream and req.conductor_progress,
    )


_STATUS: dict[ErrorCode, tuple[int, str]] = {
    ErrorCode.BAD_REQUEST: (400, "invalid_request_error"),
    ErrorCode.PAYLOAD_TOO_LARGE: (413, "invalid_request_error"),
    ErrorCode.BUDGET_EXCEEDED: (422, "budget_exceeded"),
    ErrorCode.UNAVAILABLE: (503, "service_unavailable"),
    ErrorCode.TIMEOUT: (503, "service_unavailable"),
    ErrorCode.WORKER_ERROR: (502, "upstream_error"),
    ErrorCode.PLANNER_ERROR: (502, "upstream_error"),
    ErrorCode.FORMAT_ERROR: (502, "upstream_error"),
    ErrorCode.VERIFIER_ERROR: (502, "upstream_error"),
    ErrorCode.SKIPPED: (502, "upstream_error"),
    ErrorCode.INTERNAL: (500, "server_error"),
}
RETRY_AFTER_S = 1


def error_from(info: ErrorInfo) -> GatewayError:
    """A solve API error as an HTTP error; retryable ones are 503 with Retry-After (the SDKs retry those)."""
    status, kind = _STATUS.get(info.code, (500, "server_error"))
    if info.retryable and status < 500:
        status, kind = 503, "service_unavailable"
    return GatewayError(
        status,
        info.message,
        kind=kind,
        code=str(info.code),
        param=info.field,
        retry_after=RETRY_AFTER_S if status == 503 else None,
    )


def usage_body(usage: Usage) -> dict[str, object]:
    """OpenAI's usage fields plus the Conductor's dollars and worker calls (extra keys the SDKs keep)."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cost_usd": round(usage.cost_usd, 8),
        "calls": usage.calls,
    }


def conductor_body(result: SolveResult) -> dict[str, object]:
    """The Conductor's own view of the task, for clients that want it: id, steps per round, any error."""
    body: dict[str, object] = {
        "task_id": result.task_id,
        "rounds": len(result.workflows),
        "steps": sum(len(r.steps) for r in result.workflows),
        "workers": [s.worker for r in result.workflows for s in r.steps],
        "latency_s": result.latency_s,
    }
    if result.error is not None:
        body["error"] = msgspec.to_builtins(result.error)
    return body


def finish_reason(result: SolveResult) -> str:
    return "length" if result.error is not None and result.error.code == ErrorCode.BUDGET_EXCEEDED else "stop"


def completion_body(result: SolveResult, model: str, created: int | None = None) -> dict[str, object]:
    """A finished task as ``chat.completion``; the caller has checked that it carries an answer."""
    return {
        "id": f"chatcmpl-{result.task_id}",
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.answer, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason(result),
            }
        ],
        "usage": usage_body(result.usage.total),
        "conductor": conductor_body(result),
    }


def chunk(task_id: str, model: str, created: int, choices: list[dict[str, object]], **extra: object) -> dict[str, object]:
    return {
        "id": f"chatcmpl-{task_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }


def answer_pieces(answer: str, size: int = 48) -> list[str]:
    """The answer in pieces that end on whitespace where possible, so a streaming UI shows words, not fragments."""
    pieces: list[str] = []
    start = 0
    while start < len(answer):
        end = min(len(answer), start + size)
        if end < len(answer):
            space = answer.rfind(" ", start + 1, end)
            end = space + 1 if space > start else end
        pieces.append(answer[start:end])
        start = end
    return pieces
