"""Token and dollar accounting carried by every worker call, plan and task."""

from __future__ import annotations

import msgspec


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            calls=self.calls + other.calls,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Per-worker (by pool name), planner and total usage for one task."""

    by_worker: dict[str, Usage] = {}
    planner: Usage = Usage()
    total: Usage = Usage()
