"""OpenAI's wire shapes for every endpoint the gateway serves, as msgspec structs: what a client sends, what it gets
back (a response, or a stream of chunks), and the error shape. No logic: services/gateway/translation.py fills them
from the solve API, services/gateway/serving.py returns them, services/gateway/routes.py encodes them.

Endpoints: ``POST /v1/chat/completions`` (``ChatCompletionRequest`` -> ``ChatCompletionResponse``, or with
``stream=true`` a stream of ``ChatCompletionChunk``), ``GET /v1/models`` (``ModelList``), ``GET /v1/models/{id}``
(``ModelCard``), and the Conductor's own ``GET /v1/conductor/tasks/{task_id}`` (``ChatCompletionResponse`` of a
durable task). Every failure is an ``ErrorResponse``. The Conductor's additions ride as extra fields (``conductor``
on a response or chunk, ``cost_usd`` and ``calls`` in ``usage``), which the OpenAI SDKs keep in ``model_extra``.

Fields that OpenAI sends as ``null`` are ``None``; fields it leaves out are ``UNSET`` (msgspec never encodes them).
"""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, UnsetType

from schemas.errors import ErrorInfo
from schemas.solve import Budget, ProgressEvent

# --- POST /v1/chat/completions: the request ---------------------------------------------------------------------


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
    conductor_progress: bool = (
        False  # stream progress events as extra chunks (choices: [], a `conductor` field)
    )


# --- what a finished task is, in both shapes ---------------------------------------------------------------------

FinishReason = Literal["stop", "length"]


class UsageInfo(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's usage fields plus the Conductor's dollars and worker calls."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float
    calls: int


class ConductorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The Conductor's own view of a task, for clients that want it: id, steps per round, any error."""

    task_id: str
    rounds: int
    steps: int
    workers: list[str]
    latency_s: float
    error: ErrorInfo | UnsetType = UNSET


class ProgressInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A progress chunk's ``conductor`` field: one event of the task (``conductor_progress``)."""

    progress: ProgressEvent


# --- the response ------------------------------------------------------------------------------------------------


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] = "assistant"
    content: str
    refusal: None = None


class ChatCompletionChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    message: ChatMessage
    logprobs: None = None
    finish_reason: FinishReason


class ChatCompletionResponse(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    conductor: ConductorInfo


# --- the stream ----------------------------------------------------------------------------------------------------


class DeltaMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["assistant"] | UnsetType = UNSET
    content: str | UnsetType = UNSET


class ChatCompletionStreamChoice(msgspec.Struct, frozen=True, kw_only=True):
    index: int = 0
    delta: DeltaMessage
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One server-sent event. A chunk with ``choices: []`` carries only ``usage`` (OpenAI's shape for
    ``stream_options.include_usage``) or only ``conductor`` (a progress event): plain clients skip both."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | UnsetType = UNSET
    conductor: ConductorInfo | ProgressInfo | UnsetType = UNSET


# --- GET /v1/models, GET /v1/models/{id} -------------------------------------------------------------------------


class ModelCard(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "conductor"


class ModelList(msgspec.Struct, frozen=True, kw_only=True):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# --- every failure -------------------------------------------------------------------------------------------------


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(msgspec.Struct, frozen=True, kw_only=True):
    """OpenAI's error shape: an HTTP error's body, and in a stream that already began, its last event."""

    error: ErrorBody


encode = msgspec.json.Encoder().encode
