"""The search-based cold start (issue 18): supervised rows whose routing was *found*, not drawn at random.

The keys named here are config ``[cold_start.search]``'s. For each training question and its pool view, every
candidate workflow of a small grammar (one worker alone; one solves and another checks with access; one solves and
checks twice; with ``grammar = "relay"`` also chains where another worker checks between the solver's own checks) is
scored through the rollout API on ``draws`` fresh draws (the pool must vary its answers per rollout:
``data.fresh_draws``). A candidate's value is its mean reward minus ``cost_weight`` times its mean $, where the mean
reward is *shrunk* toward the same candidate's mean over every question of the domain (``prior`` pseudo-draws): a
handful of draws on one question cannot tell a lucky cheap worker from a good one (issue 18, cause 5: selection on
noise), while the domain mean over hundreds of questions can. The best candidate becomes one SFT row: the real
prompt, and a short completion in one fixed shape whose reasoning names why the chosen workers fit (their own
descriptions) and whose check subtasks are worded as checks.

Sim rollouts cost milliseconds; generation and updates are what cost CPU. So this stage spends rollouts freely and
produces few, well-labelled rows.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conductor.pool import Pool, WorkerSpec
from conductor.reward import cost_term
from conductor.workflow import render_completion
from schemas.plan import Workflow
from services.learner.config import ConfigError, LearnerConfig, SearchSection
from services.learner.episodes import Episode, first_round, messages, sample_view, view_workers
from services.learner.rewards import ConductorReward
from tasks.problem import Problem

KIND = {"math": "a math problem", "mcq": "a multiple-choice question", "code": "a programming task"}
FORMAT = {
    "math": "Put the final answer in \\boxed{}.",
    "mcq": "End with a line 'Answer: X' with the letter of the option.",
    "code": "Give the complete program in one python code block.",
}
SOLVE = "Solve the question step by step."
CHECK = "Check the answer above step by step and correct it if needed."


@dataclass(frozen=True, slots=True)
class Candidate:
    """A workflow in view ordinals, with its topology name (for the histogram) and what it is keyed by across
    questions: the topology and the *workers* it names, so views that number them differently still pool."""

    topology: str
    ordinals: tuple[int, ...]

    def key(self, view: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        return self.topology, tuple(view[i] for i in self.ordinals)


GRAMMARS = ("short", "relay")


def candidates(k: int, grammar: str = "short") -> list[Candidate]:
    """Every candidate for a view of ``k`` workers. ``short``: alone; solve then check (any pair); solve, check,
    check. ``relay`` adds, for a solver ``a`` and another worker ``s``: (a, s, a), (a, s, s, a), (a, s, a, s, a) —
    ``s`` checks, then ``a`` checks again having read both answers (config ``cold_start.search.grammar``)."""
    if grammar not in GRAMMARS:
        raise ValueError(f"grammar {grammar!r}: expected one of {', '.join(GRAMMARS)}")
    alone = [Candidate("single", (a,)) for a in range(k)]
    pairs = [Candidate("solve_check", (a, b)) for a in range(k) for b in range(k)]
    triples = [Candidate("solve_check_check", (a, a, a)) for a in range(k)]
    if grammar == "short":
        return [*alone, *pairs, *triples]
    others = [(a, s) for a in range(k) for s in range(k) if s != a]
    relays = [Candidate("relay3", (a, s, a)) for a, s in others]
    relays += [Candidate("relay4", (a, s, s, a)) for a, s in others]
    relays += [Candidate("relay5", (a, s, a, s, a)) for a, s in others]
    return [*alone, *pairs, *triples, *relays]


def _fit(worker: WorkerSpec) -> str:
    """The first clause of a worker's description, as a reason: "open-weight reasoning model tuned for ..."."""
    text = (worker.description or worker.name).split(";")[0].split(".")[0].strip()
    return text[:1].lower() + text[1:]


def completion(
    c: Candidate, domain: str, workers: Sequence[WorkerSpec], reasoning: str = "ordinal_first"
) -> str:
    """The candidate as a completion in the one fixed shape the SFT rows use (``workers``: the view, in order;
    ``reasoning``: config ``cold_start.search.reasoning``)."""
    fmt = FORMAT.get(domain, "Give the final answer.")
    first = c.ordinals[0]
    kind = KIND.get(domain, "a question")
    if reasoning == "fit_first":
        why = f"This is {kind}. The {_fit(workers[first])} is Model {first}; it fits it best"
    else:
        why = f"This is {kind}. Model {first} ({_fit(workers[first])}) fits it best"
    tasks, access = [f"{SOLVE} {fmt}"], [[]]
    if len(c.ordinals) == 1:
        reasoning = f"{why}, so it answers alone."
    else:
        # one checker, the solver itself checking again, or a relay (``candidates``)
        checkers = c.ordinals[1:]
        if len(set(checkers)) == 1:
            times = "" if len(checkers) == 1 else f" {len(checkers)} times"
            reasoning = f"{why}, so it solves it; Model {checkers[0]} then checks the answer{times}."
        else:
            helper = checkers[0]  # a relay: another worker checks first (``candidates``)
            turns = ", then ".join(f"Model {o}" for o in checkers[1:])
            reasoning = (
                f"{why}, so it solves it; Model {helper} ({_fit(workers[helper])}) then checks the answer, "
                f"then {turns} check it in turn."
            )
        tasks += [f"{CHECK} {fmt}"] * len(checkers)
        access += ["all"] * len(checkers)
    return render_completion(
        reasoning, Workflow(model_id=list(c.ordinals), subtasks=tasks, access_list=access)
    )


@dataclass
class Tally:
    """Rewards and $ of one candidate, on one question or over a domain."""

    reward: float = 0.0
    cost: float = 0.0
    n: int = 0

    def add(self, reward: float, cost: float, n: int = 1) -> None:
        self.reward, self.cost, self.n = self.reward + reward, self.cost + cost, self.n + n

    @property
    def mean(self) -> float:
        return self.reward / self.n if self.n else 0.0

    @property
    def mean_cost(self) -> float:
        return self.cost / self.n if self.n else 0.0


@dataclass
class Searched:
    """One question's episode and its candidates' tallies (in ``candidates(len(view), grammar)`` order)."""

    episode: Episode
    tallies: list[Tally]
    grammar: str = "short"

    @property
    def candidates(self) -> list[Candidate]:
        return candidates(len(self.episode.pool), self.grammar)


def search(
    problems: Sequence[Problem], pool: Pool, config: LearnerConfig, reward: ConductorReward, *, seed: int = 0
) -> list[Searched]:
    """Score every candidate of every question on ``cold_start.search.draws`` fresh draws (masked rollouts are
    left out)."""
    c = _section(config)
    rng = random.Random(f"search:{seed}")
    workers = view_workers(pool, config.data)
    chosen = _balanced(problems, c.questions, rng)
    episodes = [first_round(p, sample_view(workers, rng, config.data)) for p in chosen]
    out: list[Searched] = []
    for batch in _chunks(episodes, 16):
        eps, texts, where = [], [], []
        for i, ep in enumerate(batch):
            view = pool.subset(ep.pool)
            for j, cand in enumerate(candidates(len(view), c.grammar)):
                text = completion(cand, ep.domain, view)
                eps += [ep] * c.draws
                texts += [text] * c.draws
                where += [(i, j)] * c.draws
        tallies = [[Tally() for _ in candidates(len(ep.pool), c.grammar)] for ep in batch]
        for (i, j), s in zip(where, reward.score(eps, texts), strict=True):
            if s.result.reward is not None:
                tallies[i][j].add(s.result.reward, s.result.usage.cost_usd)
        out += [Searched(ep, t, c.grammar) for ep, t in zip(batch, tallies, strict=True)]
    return out


def _section(config: LearnerConfig) -> SearchSection:
    if config.cold_start.search is None:
        raise ConfigError("the search cold start needs a [cold_start.search] table")
    return config.cold_start.search


def _balanced(problems: Sequence[Problem], n: int, rng: random.Random) -> list[Problem]:
    """``n`` questions, the domains in turn (as training draws them), without repeats while a domain lasts."""
    by_domain: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        by_domain[p.domain].append(p)
    for items in by_domain.values():
        rng.shuffle(items)
    domains = sorted(by_domain)
    picked = []
    for i in range(n):
        items = by_domain[domains[i % len(domains)]]
        picked.append(items[(i // len(domains)) % len(items)])
    return picked


def _chunks(items: list[Episode], size: int) -> list[list[Episode]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def choose(
    searched: Sequence[Searched],
    *,
    prior: float,
    cost_weight: float,
    tolerance: float = 0.0,
    by: str = "question",
    cost_form: str = "linear",
) -> list[tuple[Episode, Candidate]]:
    """Each question's best candidate: shrunk mean reward minus ``cost_weight`` x mean $ (module docstring). With a
    ``tolerance``: the cheapest candidate (by its domain mean $) whose value is within ``tolerance`` of the best
    one's — accuracy first, then price, whatever a view costs (a linear $ term that fits the cheap specialists of
    the full pool rules out a view's only strong worker when it is expensive).

    ``by = "view"``: a candidate's value is its domain mean alone (over every question whose view holds its
    workers), so every question of a domain on one view gets the same row. Per question, the few draws' noise
    (shrunk, but not away) moves values by about the tolerance, and a rule that takes the cheapest near-best
    candidate turns noise into a bias toward the cheap: on views without a specialist 38 of 51 rows were the
    frontier model twice (77% on held-out) where three times reaches 86%.

    ``cost_form = "log"``: the $ term is ``cost_weight`` x ln($ / $0.00001) (conductor/reward.py ``cost_term``), a price
    relative to what the view already costs, so one weight buys a cheap check on a view of cheap specialists and a
    longer chain where the only strong worker is dear. With a large grammar use it with no tolerance: the best of
    ~95 noisy candidates is biased up by about two standard errors, so a window below it shifts with the noise."""
    if by not in ("question", "view"):
        raise ValueError(f"by {by!r}: expected question or view")
    domain_means: dict[tuple[str, tuple[str, tuple[str, ...]]], Tally] = defaultdict(Tally)
    for s in searched:
        for cand, t in zip(s.candidates, s.tallies, strict=True):
            domain_means[(s.episode.domain, cand.key(s.episode.pool))].add(t.reward, t.cost, t.n)
    picks = []
    for s in searched:
        scored = []  # (value, domain mean $, order, candidate)
        for n, (cand, t) in enumerate(zip(s.candidates, s.tallies, strict=True)):
            dm = domain_means[(s.episode.domain, cand.key(s.episode.pool))]
            if not dm.n:
                continue
            mean = dm.mean if by == "view" else (t.reward + prior * dm.mean) / (t.n + prior)
            scored.append((mean - cost_term(dm.mean_cost, cost_weight, cost_form), dm.mean_cost, n, cand))
        if not scored:
            continue
        best = max(value for value, *_ in scored)
        if tolerance > 0:
            near = [(cost, n, cand) for value, cost, n, cand in scored if value >= best - tolerance]
            picks.append((s.episode, min(near, key=lambda x: x[:2])[2]))
        else:
            picks.append((s.episode, next(cand for value, _, _, cand in scored if value == best)))
    return picks


def rows(
    picks: Sequence[tuple[Episode, Candidate]], pool: Pool, config: LearnerConfig
) -> list[dict[str, Any]]:
    """SFT rows (prompt, completion) for the chosen candidates."""
    style = _section(config).reasoning
    return [
        {
            "prompt": messages(ep, pool, config.data),
            "completion": [
                {"role": "assistant", "content": completion(cand, ep.domain, pool.subset(ep.pool), style)}
            ],
        }
        for ep, cand in picks
    ]


def figures(picks: Sequence[tuple[Episode, Candidate]], specialists: dict[str, str]) -> dict[str, Any]:
    """What the search chose: topology histogram, steps per workflow, the specialist's share per domain (of the rows
    whose view shows it)."""
    topo = Counter(c.topology for _, c in picks)
    share: dict[str, float] = {}
    for domain, name in specialists.items():
        mine = [(ep, c) for ep, c in picks if ep.domain == domain and name in ep.pool]  # views that show it
        if mine:
            share[domain] = sum(name in c.key(ep.pool)[1] for ep, c in mine) / len(mine)
    steps = sum(len(c.ordinals) for _, c in picks) / max(1, len(picks))
    return {
        "rows": len(picks),
        "topologies": dict(topo),
        "mean_steps": round(steps, 3),
        "specialist_share": share,
    }
