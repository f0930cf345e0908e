"""The flat error vocabulary shared by every service: one code, one message, an optional field and retryability."""

from __future__ import annotations

from enum import StrEnum

import msgspec


class ErrorCode(StrEnum):
    """What went wrong, classified once at the boundary that saw it."""

    BAD_REQUEST = "bad_request"  # malformed JSON, wrong types, empty question, unknown worker, ...
    PAYLOAD_TOO_LARGE = "payload_too_large"
    FORMAT_ERROR = "format_error"  # the Conductor's completion did not parse into a valid workflow
    WORKER_ERROR = "worker_error"  # a worker call failed after retries (provider 4xx/5xx/timeouts)
    PLANNER_ERROR = "planner_error"  # the policy backend failed (not a format error)
    VERIFIER_ERROR = "verifier_error"  # the verifier itself failed (infrastructure), not a wrong answer
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"  # a downstream service did not answer
    SKIPPED = "skipped"  # a step not run because a step it depends on failed or the budget ran out
    CANCELLED = (
        "cancelled"  # the task's owner cancelled it (a gateway client hung up); what ran is in the result
    )
    INTERNAL = "internal"


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A typed error carried inside a reply; never an exception across the wire."""

    code: ErrorCode
    message: str
    field: str | None = None  # the request field at fault, as a dotted path ("pool[2]", "max_steps")
    retryable: bool = False
    detail: str | None = None  # e.g. the exception chain, provider status and body excerpt
