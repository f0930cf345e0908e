"""OpenAI chat-completions (services/gateway/protocol.py) translated to and from the solve API: pure functions,
no I/O.

What a client sends is OpenAI's request body; the Conductor-only options (pool, recursion rounds, budget, domain,
durable, progress) ride in the same body as extra top-level fields, which is where the OpenAI SDKs put
``extra_body``. Sampling parameters (temperature, top_p, max_tokens, ...) are accepted and not forwarded: the
Conductor writes each worker's instruction and the pool file fixes each worker's sampling. Features a Conductor
cannot honour (several choices, tool calls, forced JSON) are refused with a 400 naming the field, never ignored.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
from msgspec import UNSET, UnsetType

from conductor.strategy import StrategyError, parse_strategy
from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import ProgressEvent, SolveRequest, SolveResult
from schemas.usage import Usage
from services.gateway.errors import GatewayError, bad_request, error_from
from services.gateway.protocol import (
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    ChatMessage,
    ChatMessageIn,
    ConductorInfo,
    DeltaMessage,
    FinishReason,
    ModelCard,
    ProgressInfo,
    UsageInfo,
)

CONDUCTOR_MODEL = "conductor"
BASELINE_MODELS = ("moa", "refine:5", "consensus:5")
"""Advertised by ``GET /v1/models``; any name of the strategy grammar is accepted (``refine:3``, ``moa:4+r1``...)."""


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
            raise bad_request(
                f"only text content parts are supported, got {part.type!r}", f"messages[{index}].content[{j}]"
            )
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
    instructions = [
        t for m, t in zip(messages, texts, strict=True) if m.role in ("system", "developer") and t.strip()
    ]
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
        raise bad_request(
            "tool calls are not supported by the Conductor", "tools" if req.tools is not None else "functions"
        )
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


NO_ANSWER = ErrorInfo(code=ErrorCode.INTERNAL, message="the task ended without an answer")


def answer_of(result: SolveResult) -> str:
    """The task's answer, or its error as the one a client is sent."""
    if result.answer is None:
        raise error_from(result.error or NO_ANSWER)
    return result.answer


def usage_info(usage: Usage) -> UsageInfo:
    return UsageInfo(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cost_usd=round(usage.cost_usd, 8),
        calls=usage.calls,
    )


def conductor_info(result: SolveResult) -> ConductorInfo:
    return ConductorInfo(
        task_id=result.task_id,
        rounds=len(result.workflows),
        steps=sum(len(r.steps) for r in result.workflows),
        workers=[s.worker for r in result.workflows for s in r.steps],
        latency_s=result.latency_s,
        error=UNSET if result.error is None else result.error,
    )


def finish_reason(result: SolveResult) -> FinishReason:
    return "length" if result.error is not None and result.error.code == ErrorCode.BUDGET_EXCEEDED else "stop"


def completion(result: SolveResult, model: str, created: int) -> ChatCompletionResponse:
    """A finished task as ``chat.completion``, or its error raised when it has no answer."""
    return ChatCompletionResponse(
        id=f"chatcmpl-{result.task_id}",
        created=created,
        model=model,
        choices=[
            ChatCompletionChoice(
                message=ChatMessage(content=answer_of(result)), finish_reason=finish_reason(result)
            )
        ],
        usage=usage_info(result.usage.total),
        conductor=conductor_info(result),
    )


class Chunks:
    """The chunks of one streamed task; they share its id, model and creation time."""

    def __init__(self, task_id: str, model: str, created: int) -> None:
        self.id, self.model, self.created = f"chatcmpl-{task_id}", model, created

    def chunk(
        self,
        choices: list[ChatCompletionStreamChoice],
        *,
        usage: UsageInfo | UnsetType = UNSET,
        conductor: ConductorInfo | ProgressInfo | UnsetType = UNSET,
    ) -> ChatCompletionChunk:
        return ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=choices,
            usage=usage,
            conductor=conductor,
        )

    def role(self) -> ChatCompletionChunk:
        return self.chunk([ChatCompletionStreamChoice(delta=DeltaMessage(role="assistant", content=""))])

    def progress(self, event: ProgressEvent) -> ChatCompletionChunk:
        return self.chunk([], conductor=ProgressInfo(progress=event))

    def result(self, result: SolveResult, include_usage: bool) -> Iterator[ChatCompletionChunk]:
        """The answer in word-aligned pieces, then the chunk with ``finish_reason``, the Conductor's view and the
        usage — or, with ``include_usage``, OpenAI's own shape: the usage alone in one more chunk, no choices."""
        for piece in answer_pieces(answer_of(result)):
            yield self.chunk([ChatCompletionStreamChoice(delta=DeltaMessage(content=piece))])
        usage = usage_info(result.usage.total)
        last = [ChatCompletionStreamChoice(delta=DeltaMessage(), finish_reason=finish_reason(result))]
        yield self.chunk(last, conductor=conductor_info(result), usage=UNSET if include_usage else usage)
        if include_usage:
            yield self.chunk([], usage=usage)


def model_list(workers: list[str]) -> list[ModelCard]:
    return [ModelCard(id=i) for i in (CONDUCTOR_MODEL, *BASELINE_MODELS, *workers)]


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
