"""The strategy grammar: what a name like ``moa``, ``refine:3@sim-math`` or ``conductor+r1`` means, decided once.

Every door that takes a strategy name uses this module — `conductor eval --strategy`, the gateway's ``model``, the
CLI's ``--policy`` — so the same name builds the same workflow everywhere (issue 21; docs/method.md §7 for the
paper's baselines). A strategy only chooses the ``SolveRequest``'s ``policy`` (the planner's baseline spec, in
ordinals of the request's pool: services/planner/baselines.py), ``max_steps`` and ``max_rounds``; nothing is
solved here. Grammar::

    conductor                 the planner's configured policy (a trained checkpoint, an endpoint, or its default
                              baseline); ``conductor eval --policy SPEC`` configures the embedded planner
    single:NAME | single:*    one pool worker answers alone; ``*`` expands to every worker of the pool
    moa[:K]                   the paper's MoA: K proposers (default 7, cycling over the pool) + an aggregator =
                              8 calls (docs/method.md §7), so max_steps = K + 1
    refine[:N][@NAME]         self-reflection: NAME (default the pool's first worker) answers, then revises; N = 5
    consensus[:N][@NAME]      N = 5 independent samples, then NAME states the majority answer (N + 1 steps)
    worker:NAME               the pool worker NAME writes the workflow from the Conductor's own prompt
    ...+rN                    any of the above with N recursion rounds after the first (``conductor+r1``)

Worker names map to the ordinals the planner's baselines take, within the run's pool (``--pool-subset`` restricts
it: the same strategies on a smaller pool is the pool-shift comparison).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec


class StrategyError(ValueError):
    """A strategy name that does not parse, or names a worker outside the pool; the message is the grammar's."""


MOA_PROPOSERS = 7
"""docs/method.md §7: the paper's MoA baseline makes 8 calls, one proposer layer and an aggregator."""

REFINE_STEPS = 5
"""docs/method.md §7: self-reflection revises up to 5 times."""

CONSENSUS_SAMPLES = 5
"""docs/method.md §7: consensus draws 5 samples."""

KINDS = ("conductor", "single", "moa", "refine", "consensus", "worker")
GRAMMAR = "expected conductor, single:NAME, worker:NAME, moa[:K], refine[:N][@NAME] or consensus[:N][@NAME], each +rN"
"""The grammar in one line: the message of every error, the same at every door."""
_SPEC = re.compile(r"(?P<kind>[a-z]+)(?::(?P<arg>[^@+]+))?(?:@(?P<at>[^+]+))?(?:\+r(?P<rounds>\d{1,2}))?")


class Strategy(msgspec.Struct, frozen=True, kw_only=True):
    label: str  # how results and reports name it, e.g. "single:sim-math", "moa", "conductor+r1"
    policy: str | None  # SolveRequest.policy; None = the planner's configured policy
    max_steps: int | None = None  # None = the executor's default (5)
    max_rounds: int = 0


def parse_strategies(spec: str | Sequence[str], pool: Sequence[str]) -> list[Strategy]:
    """``spec`` = "a,b" or a list; ``pool`` = the run's worker names in order (the request's pool)."""
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[Strategy] = []
    for part in (p.strip() for p in parts):
        if part:
            out.extend(s for s in expand(part, pool) if s.label not in {o.label for o in out})
    if not out:
        raise StrategyError(f"no strategy given; {GRAMMAR}")
    return out


def parse_strategy(text: str, pool: Sequence[str]) -> Strategy:
    """One strategy name (``single:*`` is several: use ``expand``)."""
    found = expand(text, pool)
    if len(found) != 1:
        raise StrategyError(f"{text!r} names {len(found)} strategies; name one worker")
    return found[0]


def expand(text: str, pool: Sequence[str]) -> list[Strategy]:
    m = _SPEC.fullmatch(text.strip())
    if m is None or m.group("kind") not in KINDS:
        raise StrategyError(f"unknown strategy {text!r}; {GRAMMAR}")
    rounds = int(m.group("rounds") or 0)
    if m.group("kind") == "single" and m.group("arg") == "*":
        return [_one("single", name, None, rounds, pool) for name in pool]
    return [_one(m.group("kind"), m.group("arg"), m.group("at"), rounds, pool)]


def _one(kind: str, arg: str | None, at: str | None, rounds: int, pool: Sequence[str]) -> Strategy:
    suffix = f"+r{rounds}" if rounds else ""
    match kind:
        case "conductor" if arg is None and at is None:
            return Strategy(label="conductor" + suffix, policy=None, max_rounds=rounds)
        case "single" if arg is not None and at is None:
            name = _worker(arg, pool)
            return Strategy(
                label=f"single:{name}{suffix}", policy=f"single:{pool.index(name)}", max_rounds=rounds
            )
        case "worker" if arg is not None and at is None:
            name = _worker(arg, pool)
            return Strategy(label=f"worker:{name}{suffix}", policy=f"worker:{name}", max_rounds=rounds)
        case "moa" if at is None:
            k = _count(arg, MOA_PROPOSERS, kind)
            label = "moa" if k == MOA_PROPOSERS else f"moa:{k}"
            return Strategy(label=label + suffix, policy=f"moa:{k}", max_steps=k + 1, max_rounds=rounds)
        case "refine" | "consensus":
            n = _count(arg, REFINE_STEPS if kind == "refine" else CONSENSUS_SAMPLES, kind)
            name = _worker(at, pool) if at is not None else pool[0]
            worker = f"@{name}" if at is not None else ""
            steps = n if kind == "refine" else n + 1
            return Strategy(
                label=f"{kind}:{n}{worker}{suffix}",
                policy=f"{kind}:{n}@{pool.index(name)}",
                max_steps=steps,
                max_rounds=rounds,
            )
    if kind in {"single", "worker"} and arg is None:
        raise StrategyError(f"strategy {kind!r} needs a worker: {kind}:NAME")
    given = f"{kind}{':' + arg if arg else ''}{'@' + at if at else ''}"
    raise StrategyError(f"strategy {given!r} is malformed; {GRAMMAR}")


def _worker(name: str, pool: Sequence[str]) -> str:
    if name in pool:
        return name
    if name.isdigit() and int(name) < len(pool):
        return pool[int(name)]
    raise StrategyError(f"worker {name!r} is not in the run's pool {list(pool)}")


def _count(arg: str | None, default: int, kind: str) -> int:
    if arg is None:
        return default
    if not arg.isdigit() or not 1 <= int(arg) <= 9:
        raise StrategyError(f"{kind}:{arg}: the count must be a whole number 1-9")
    return int(arg)
