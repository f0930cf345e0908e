"""Worker-adapter subject: one chat call to one named worker of the pool."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from schemas.contract import RequestReply
from schemas.errors import ErrorInfo
from schemas.usage import Usage

WORK_SUBJECT = "conductor.work"
"""Request/reply: ``WorkRequest`` in, ``WorkReply`` out. Queue group ``worker-adapter``."""


class FaultReason(StrEnum):
    """Why one try of a worker call failed: the keys of ``WorkReply.faults`` and the ``reason`` label of
    ``conductor_worker_faults_total``. Classified once, where the provider's failure is seen
    (services/worker_adapter/provider.py says which HTTP statuses and errors map to which)."""

    RATE_LIMITED = "rate_limited"  # 429: transient, honours Retry-After
    SERVER_ERROR = "server_error"  # 5xx (including Anthropic's 529 overloaded): transient
    TIMEOUT = "timeout"  # 408, the SDK's timeout or the worker-adapter's own per-try deadline: transient
    CONNECTION = "connection"  # refused, reset, DNS: transient
    CONFLICT = "conflict"  # 409 lock conflict, 425 too early: transient
    CLIENT_ERROR = "client_error"  # any other 4xx, or a request the model cannot take (too long): permanent
    INVALID_RESPONSE = "invalid_response"  # a 2xx the SDK cannot use (no choices, wrong shape): permanent
    CONFIG = "config"  # missing credentials, provider, weights or sim table: permanent


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "user", "assistant"]
    content: str


class WorkRequest(msgspec.Struct, frozen=True, kw_only=True):
    worker: Annotated[str, Meta(description="The pool name; the planner only ever sees ordinals.")]
    messages: list[ChatMessage]
    task_id: str = ""
    round: Annotated[int, Meta(ge=0)] = 0
    step: Annotated[int, Meta(ge=0)] = 0
    # Per-call overrides of the pool file's parameters; None keeps the pool's value.
    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0)] | None = None
    timeout_s: Annotated[float, Meta(gt=0)] | None = None
    cache: bool = False  # opt in to the content-addressed worker-call cache
    # Set by the executor for durable tasks, which can be redelivered after a crash: the worker-adapter then keys
    # the call by (task_id, round, step) so a finished call is replayed, never paid twice. Request/reply solves are
    # never redelivered and skip that bookkeeping (two KV round trips per call).
    idempotent: bool = False


class WorkReply(msgspec.Struct, frozen=True, kw_only=True):
    worker: str
    text: str = ""
    model: str = ""
    usage: Usage = Usage()
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False  # served from the worker-call cache: original token counts, cost 0, calls 0
    replayed: bool = False  # this (task_id, round, step) was already answered; the stored reply, no new call
    error: ErrorInfo | None = None
    # Failed tries by ``FaultReason`` value, the last one included when the call gave up; so ``attempts`` equals
    # the sum plus one on success. Keys are ``str``, not ``FaultReason``, so a consumer older than a new reason
    # still decodes the reply (schemas/__init__.py, rules 4 and 6).
    faults: dict[str, int] = {}


WORK: RequestReply[WorkRequest, WorkReply] = RequestReply(
    subject=WORK_SUBJECT,
    queue="worker-adapter",
    title="work",
    request=WorkRequest,
    reply=WorkReply,
    description="Internal (executor -> worker-adapter): one chat call to one named pool worker, with retries, "
    "limits and cost accounting; provider failures come back as a typed error in the reply.",
    error_reply=lambda info, request: WorkReply(worker=request.worker if request else "", error=info),
)
