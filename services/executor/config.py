"""Executor settings, read once at start-up (``conductor.settings.read``; docs/settings.md lists them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

import msgspec

from conductor.liveness import CallPolicy
from conductor.settings import (
    MAX_PAYLOAD_BYTES,
    MAX_STEPS_CAP,
    CommonSettings,
    Count,
    Env,
    EnvFields,
    PositiveSeconds,
    Seconds,
    read,
)
from schemas.solve import Budget


class IntakeSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Durable intake: JetStream consumer AckWait/MaxDeliver, redelivery backoff and the retry horizon.

    Transient failures (a downstream outage) are retried until they have lasted ``retry_horizon_s`` — a time, so an
    outage shorter than the horizon never dead-letters a task however many deliveries it takes. ``max_deliver``
    is only a backstop against a task that crashes its process on every delivery (it never reaches the horizon
    check); the backoff is capped low (``backoff_max_s``) so work resumes within seconds of an outage's end."""

    ack_wait_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_ACK_WAIT_S",
            "JetStream AckWait of the task consumer; in-progress acks every third of it.",
        ),
    ] = 30.0
    max_deliver: Annotated[
        Count,
        Env(
            "CONDUCTOR_MAX_DELIVER",
            "Backstop on deliveries of one task (a task that crashes its process each time); then a dead letter.",
        ),
    ] = 1000
    backoff_base_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_REDELIVERY_BACKOFF_BASE_S",
            "First delay before a transiently failed task is redelivered.",
        ),
    ] = 1.0
    backoff_max_s: Annotated[
        Seconds, Env("CONDUCTOR_REDELIVERY_BACKOFF_MAX_S", "Ceiling of the exponential redelivery delay.")
    ] = 10.0
    retry_horizon_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_RETRY_HORIZON_S",
            "How long a task's transient failures are retried before its dead letter (a time, not a count).",
        ),
    ] = 600.0
    # Taking more only parks tasks inside the process, where another replica cannot run them and their AckWait
    # clocks keep running.
    concurrency: Annotated[
        Count | None,
        Env(
            "CONDUCTOR_INTAKE_CONCURRENCY",
            "Durable tasks run at once; unset: what the pool can serve (sum of worker concurrency), capped by "
            "CONDUCTOR_HANDLER_CONCURRENCY.",
        ),
    ] = None
    max_payload_bytes: Annotated[Count, MAX_PAYLOAD_BYTES] = 1_048_576


class CallSettings(CallPolicy, frozen=True, kw_only=True):
    """Liveness of the executor's requests to planner, worker-adapter and verifier (``CallPolicy``, in
    conductor/liveness.py): a responder is asked for a beat every ``beat_s`` while it works; ``beat_misses`` silent
    periods mean it died or became unreachable, and the call fails over (tries again, reaching another replica or a
    restarted one) for up to ``failover_s`` before it is reported ``unavailable``. The long ``*_timeout_s`` then
    bound only a live, slow responder."""

    beat_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_BEAT_S", "A working responder is asked for a beat this often.")
    ] = 2.0
    beat_misses: Annotated[
        Count, Env("CONDUCTOR_BEAT_MISSES", "Silent beat periods after which a responder counts as lost.")
    ] = 3
    failover_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_FAILOVER_S",
            "How long a lost or missing responder is tried again before `unavailable`.",
        ),
    ] = 30.0
    verify_retry_s: Annotated[
        Seconds,
        Env(
            "CONDUCTOR_VERIFY_RETRY_S",
            "Transient verifier failures are retried this long before the task is released.",
        ),
    ] = 60.0


class StoreSettings(msgspec.Struct, frozen=True, kw_only=True):
    duplicate_window_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_DUPLICATE_WINDOW_S",
            "Resubmitting a task id within this window is dropped by JetStream.",
        ),
    ] = 3600.0
    results_ttl_s: float = 7 * 24 * 3600.0
    checkpoints_ttl_s: float = 24 * 3600.0


DEFAULT_BUDGET = EnvFields(
    {
        "max_calls": Env(
            "CONDUCTOR_BUDGET_MAX_CALLS", "Default per-task limit on worker calls; unset: none."
        ),
        "max_tokens": Env("CONDUCTOR_BUDGET_MAX_TOKENS", "Default per-task limit on tokens; unset: none."),
        "max_cost_usd": Env(
            "CONDUCTOR_BUDGET_MAX_COST_USD", "Default per-task limit on cost in USD; unset: none."
        ),
        "max_wall_s": Env("CONDUCTOR_BUDGET_MAX_WALL_S", "Default per-task limit on wall time; unset: none."),
    }
)
"""Overridden by the pool file's ``[budget]`` table, then field by field by the request's ``budget``."""


class ExecutorSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings
    default_max_steps: Annotated[
        Count,
        Env(
            "CONDUCTOR_DEFAULT_MAX_STEPS",
            "Steps a workflow may have when the request says nothing (the paper's 5).",
        ),
    ] = 5  # docs/method.md §1: at most 5 steps
    max_steps_cap: Annotated[Count, MAX_STEPS_CAP] = 10
    max_rounds_cap: Annotated[
        int,
        msgspec.Meta(ge=0),
        Env("CONDUCTOR_MAX_ROUNDS_CAP", "The most recursion rounds after the first a request may ask for."),
    ] = 4  # the paper evaluated about one extra round
    max_question_chars: int = 100_000
    plan_timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_PLAN_TIMEOUT_S", "How long the executor waits for a plan.")
    ] = 300.0
    work_timeout_s: Annotated[
        PositiveSeconds,
        Env("CONDUCTOR_WORK_TIMEOUT_S", "How long the executor waits for one worker call, retries included."),
    ] = 900.0  # above the worker-adapter's own retries and provider timeouts
    verify_timeout_s: Annotated[
        PositiveSeconds, Env("CONDUCTOR_VERIFY_TIMEOUT_S", "How long the executor waits for a verdict.")
    ] = 300.0
    default_budget: Annotated[Budget, DEFAULT_BUDGET] = Budget()
    durable: Annotated[
        bool,
        Env("CONDUCTOR_DURABLE", "Consume the JetStream task queue (needs a JetStream-enabled server)."),
    ] = True
    rollout_pull: Annotated[
        bool,
        Env(
            "CONDUCTOR_ROLLOUT_PULL",
            "Pull rollouts from the work queue conductor.rollout.work.> by free capacity (needs a JetStream-enabled "
            "server; the request/reply subject conductor.rollout is served either way).",
        ),
    ] = True
    checkpoint_request_reply: Annotated[
        bool,
        Env(
            "CONDUCTOR_CHECKPOINT_REQUEST_REPLY",
            "Checkpoint request/reply solves too (they are never redelivered, so off by default).",
        ),
    ] = False
    record_path: Annotated[
        str | None,
        Env(
            "CONDUCTOR_RECORD_PATH",
            "Serve-to-learn: a replay table (.jsonl.gz) that solves carrying a reference append their workers' "
            "answers to, verbatim with the question (docs/replay.md); unset: nothing is recorded.",
        ),
    ] = None
    intake: IntakeSettings = IntakeSettings()
    store: StoreSettings = StoreSettings()
    calls: CallSettings = CallSettings()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExecutorSettings:
        return read(cls, env)
