"""Per-task budgets: calls, tokens, dollars and wall time, carried across redeliveries."""

from __future__ import annotations

import time

from schemas.solve import Budget
from schemas.usage import Usage


class BudgetMeter:
    """Counts what a task has spent; ``exceeded`` names the first limit crossed."""

    def __init__(self, budget: Budget, *, spent: Usage | None = None, wall_offset_s: float = 0.0) -> None:
        """``spent`` is the worker usage plus the planner's tokens and dollars of earlier deliveries."""
        self.budget = budget
        self.started = time.monotonic() - wall_offset_s
        self.usage = spent or Usage()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def add(self, usage: Usage) -> None:
        self.usage = self.usage + usage

    def add_planner(self, usage: Usage) -> None:
        """Planner tokens and dollars count against the budget; ``max_calls`` limits worker calls only."""
        self.usage = self.usage + Usage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=usage.cost_usd
        )

    def exceeded(self) -> str | None:
        b, u = self.budget, self.usage
        if b.max_calls is not None and u.calls >= b.max_calls:
            return f"max_calls={b.max_calls} reached"
        if b.max_tokens is not None and u.total_tokens >= b.max_tokens:
            return f"max_tokens={b.max_tokens} reached ({u.total_tokens})"
        if b.max_cost_usd is not None and u.cost_usd >= b.max_cost_usd:
            return f"max_cost_usd={b.max_cost_usd} reached ({u.cost_usd:.6f})"
        if b.max_wall_s is not None and self.elapsed() >= b.max_wall_s:
            return f"max_wall_s={b.max_wall_s} reached"
        return None

    def remaining_wall(self) -> float | None:
        if self.budget.max_wall_s is None:
            return None
        return max(0.0, self.budget.max_wall_s - (self.elapsed()))


def merge_budget(default: Budget, req: Budget | None) -> Budget:
    if req is None:
        return default
    return Budget(
        max_calls=req.max_calls if req.max_calls is not None else default.max_calls,
        max_tokens=req.max_tokens if req.max_tokens is not None else default.max_tokens,
        max_cost_usd=req.max_cost_usd if req.max_cost_usd is not None else default.max_cost_usd,
        max_wall_s=req.max_wall_s if req.max_wall_s is not None else default.max_wall_s,
    )
