"""Executor settings, read once at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping

import msgspec

from conductor.settings import CommonSettings
from schemas.solve import Budget


class IntakeSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Durable intake: JetStream consumer AckWait/MaxDeliver and redelivery backoff."""

    ack_wait_s: float = 30.0
    max_deliver: int = 5
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    max_payload_bytes: int = 1_048_576


class StoreSettings(msgspec.Struct, frozen=True, kw_only=True):
    duplicate_window_s: float = 3600.0  # resubmitting a task id within this window is dropped by JetStream
    results_ttl_s: float = 7 * 24 * 3600.0
    checkpoints_ttl_s: float = 24 * 3600.0


class ExecutorSettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings
    default_max_steps: int = 5  # PAPER.md §1: at most 5 steps
    max_steps_cap: int = 10  # a request may ask for more steps than the default, up to this
    max_rounds_cap: int = 4  # recursion rounds after the first; the paper evaluated about one extra round
    max_question_chars: int = 100_000
    plan_timeout_s: float = 300.0
    work_timeout_s: float = 900.0  # above the worker-adapter's own retries and provider timeouts
    verify_timeout_s: float = 300.0
    default_budget: Budget = Budget()
    durable: bool = True  # consume the JetStream task queue (needs a JetStream-enabled server)
    checkpoint_request_reply: bool = False  # checkpoint request/reply solves too (they are not redelivered)
    intake: IntakeSettings = IntakeSettings()
    store: StoreSettings = StoreSettings()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ExecutorSettings:
        env = os.environ if env is None else env

        def opt(name: str, kind: type) -> object:
            value = env.get(name)
            return None if value in (None, "") else kind(value)

        return cls(
            common=CommonSettings.from_env(env),
            default_max_steps=int(env.get("CONDUCTOR_DEFAULT_MAX_STEPS", "5")),
            max_steps_cap=int(env.get("CONDUCTOR_MAX_STEPS_CAP", "10")),
            max_rounds_cap=int(env.get("CONDUCTOR_MAX_ROUNDS_CAP", "4")),
            plan_timeout_s=float(env.get("CONDUCTOR_PLAN_TIMEOUT_S", "300")),
            work_timeout_s=float(env.get("CONDUCTOR_WORK_TIMEOUT_S", "900")),
            verify_timeout_s=float(env.get("CONDUCTOR_VERIFY_TIMEOUT_S", "300")),
            default_budget=Budget(
                max_calls=opt("CONDUCTOR_BUDGET_MAX_CALLS", int),  # type: ignore[arg-type]
                max_tokens=opt("CONDUCTOR_BUDGET_MAX_TOKENS", int),  # type: ignore[arg-type]
                max_cost_usd=opt("CONDUCTOR_BUDGET_MAX_COST_USD", float),  # type: ignore[arg-type]
                max_wall_s=opt("CONDUCTOR_BUDGET_MAX_WALL_S", float),  # type: ignore[arg-type]
            ),
            durable=env.get("CONDUCTOR_DURABLE", "1").lower() not in {"0", "false", "no"},
            checkpoint_request_reply=env.get("CONDUCTOR_CHECKPOINT_REQUEST_REPLY", "0").lower() in {"1", "true", "yes"},
            intake=IntakeSettings(
                ack_wait_s=float(env.get("CONDUCTOR_ACK_WAIT_S", "30")),
                max_deliver=int(env.get("CONDUCTOR_MAX_DELIVER", "5")),
                backoff_base_s=float(env.get("CONDUCTOR_BACKOFF_BASE_S", "1")),
                backoff_max_s=float(env.get("CONDUCTOR_BACKOFF_MAX_S", "60")),
                max_payload_bytes=int(env.get("CONDUCTOR_MAX_PAYLOAD_BYTES", "1048576")),
            ),
            store=StoreSettings(duplicate_window_s=float(env.get("CONDUCTOR_DUPLICATE_WINDOW_S", "3600"))),
        )
