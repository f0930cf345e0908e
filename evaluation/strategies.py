"""The strategies a run compares: the one grammar (conductor/strategy.py), its errors as the eval's own."""

from __future__ import annotations

from collections.abc import Sequence

from conductor.strategy import Strategy, StrategyError
from conductor.strategy import parse_strategies as _parse
from evaluation.errors import UnknownStrategyError

__all__ = ["Strategy", "parse_strategies"]


def parse_strategies(spec: str | Sequence[str], pool: Sequence[str]) -> list[Strategy]:
    try:
        return _parse(spec, pool)
    except StrategyError as exc:
        raise UnknownStrategyError(str(exc)) from exc
