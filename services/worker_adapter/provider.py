"""The one contract every provider implements, and the one place provider failures are classified.

A provider turns (worker spec, chat messages, call parameters) into a ``Completion`` or raises exactly one of two
typed errors. Which HTTP outcomes are worth retrying is decided here, by ``classify_status``, so the openai and
anthropic adapters (and any future one) cannot drift apart:

- transient (retried with backoff by the core): 408, 409, 425, 429, every 5xx, timeouts, connection errors;
- permanent (returned at once as a typed error): every other 4xx, missing credentials, bad configuration.

Every error also carries a ``reason`` from the bounded vocabulary ``FaultReason`` (defined in schemas/work.py,
because it travels in ``WorkReply.faults`` and labels ``conductor_worker_faults_total``), so faults and retries
can be told apart by cause. Transient reasons:

- ``rate_limited``: 429;
- ``server_error``: every 5xx (Anthropic's 529 "overloaded" included);
- ``timeout``: 408, the SDK's request timeout, or the core's own per-try deadline;
- ``connection``: refused, reset or unresolvable;
- ``conflict``: 409, 425.

Permanent reasons:

- ``client_error``: every other 4xx, or a prompt the local model cannot take;
- ``invalid_response``: a 2xx the SDK cannot turn into a completion;
- ``config``: a missing key variable, provider kind, sim table, local extra or weights.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import msgspec

from conductor.pool import WorkerSpec
from schemas.work import ChatMessage, FaultReason

_TRANSIENT_4XX = {
    408: FaultReason.TIMEOUT,
    409: FaultReason.CONFLICT,
    425: FaultReason.CONFLICT,
    429: FaultReason.RATE_LIMITED,
}
TRANSIENT_STATUSES = frozenset(_TRANSIENT_4XX)
"""4xx statuses that mean "try again later": request timeout, lock conflict, too early, rate limited."""


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    input_tokens: int
    output_tokens: int
    model: str


class CallParams(msgspec.Struct, frozen=True, kw_only=True):
    """The pool's parameters after per-request overrides, plus where this call sits.

    ``sample`` identifies the step within the task (round and step), ``task`` the task and ``attempt`` the try;
    real providers ignore them, the simulated worker uses them to draw repeated steps, tasks (when its pool asks,
    ``vary_by_task``) and simulated failures independently.
    """

    max_tokens: int
    temperature: float
    timeout_s: float
    sample: int = 0
    task: str = ""
    attempt: int = 1


class ProviderError(Exception):
    """Base of the two typed outcomes; ``reason`` says why (module docstring), ``detail`` carries status and a body
    excerpt for the reply. ``reason`` has no default: every raiser classifies its own failure."""

    def __init__(
        self, message: str, *, reason: FaultReason, status: int | None = None, detail: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.status = status
        self.detail = detail


class TransientProviderError(ProviderError):
    """Worth retrying: the same request may succeed later. ``retry_after`` is the provider's hint in seconds."""

    def __init__(
        self,
        message: str,
        *,
        reason: FaultReason,
        retry_after: float | None = None,
        status: int | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message, reason=reason, status=status, detail=detail)
        self.retry_after = retry_after


class PermanentProviderError(ProviderError):
    """Not worth retrying: the same request will fail the same way (bad request, auth, unknown model)."""


class Provider(Protocol):
    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        """One completion; raises only ``TransientProviderError`` or ``PermanentProviderError`` for provider faults."""
        ...

    async def aclose(self) -> None:
        """Release clients, threads and models."""
        ...


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The server's Retry-After hint: ``retry-after-ms``, or ``retry-after`` as seconds or an HTTP date.

    Unparseable or negative values are ignored (the core falls back to its own backoff); capping is the core's job.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return seconds if seconds >= 0 else 0.0


def status_reason(status: int) -> FaultReason:
    """The ``FaultReason`` of an HTTP error status (module docstring table)."""
    if status >= 500:
        return FaultReason.SERVER_ERROR
    return _TRANSIENT_4XX.get(status, FaultReason.CLIENT_ERROR)


def classify_status(
    status: int,
    message: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: str | None = None,
) -> TransientProviderError | PermanentProviderError:
    """Map an HTTP error status to the typed error the core acts on (see the module docstring)."""
    detail = f"HTTP {status}" + (f": {body[:500]}" if body else "")
    reason = status_reason(status)
    if status in TRANSIENT_STATUSES or status >= 500:
        hint = retry_after_seconds(headers) if headers is not None else None
        return TransientProviderError(message, reason=reason, retry_after=hint, status=status, detail=detail)
    return PermanentProviderError(message, reason=reason, status=status, detail=detail)
