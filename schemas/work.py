"""Worker-adapter subject: one chat call to one named worker of the pool."""

from __future__ import annotations

from typing import Literal

import msgspec

from schemas.errors import ErrorInfo
from schemas.usage import Usage

WORK_SUBJECT = "conductor.work"
"""Request/reply: ``WorkRequest`` in, ``WorkReply`` out. Queue group ``worker-adapter``."""


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "user", "assistant"]
    content: str


class WorkRequest(msgspec.Struct, frozen=True, kw_only=True):
    worker: str  # the pool name, e.g. "gpt-5"; the planner only ever sees ordinals
    messages: list[ChatMessage]
    task_id: str = ""
    round: int = 0
    step: int = 0
    # Per-call overrides of the pool file's parameters; None keeps the pool's value.
    max_tokens: int | None = None
    temperature: float | None = None
    timeout_s: float | None = None
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
