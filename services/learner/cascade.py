"""The cascade search (issue 33): two-round workflows chosen on real models' answers, as SFT rows for both rounds.

Real pools are lopsided — one strong, dear worker and many cheap ones — so the value is in cost: answer most
questions cheaply and escalate only the hard ones. A fixed workflow cannot; a Conductor that sees the first round's
answers before deciding (docs/method.md §5, the recursion) can. This stage finds, per benchmark set and pool view, the
best such policy on the training questions and writes it as supervised rows:

1. **The answer matrix.** Every worker of the pool answers every training question once, alone, through the rollout
   API (the executor, the worker adapter, the verifier: on a replay pool each call is a lookup). With the ``own``
   behaviour model (services/worker_adapter/providers/replay.py) a step that sees no earlier step returns the
   recorded answer, so every workflow of independent steps is *exactly* a function of this matrix: its reward and $
   are computed, not sampled.
2. **The candidates.** A ``Cascade``: a first round of one, two or three independent attempts (the last one's answer
   stands), then, by what the second round is shown (tasks/finals.py: the steps agree, differ, or one stated no
   answer), either hand back (three empty lists) or one worker answers afresh. For a fixed first round the best
   action per state is chosen independently, so the search is exhaustive.
3. **The choice.** Value = right answers − λ × $; λ is swept to find each set's efficient cascades (``frontier``).
   ``[cold_start.cascade] select = "slack"`` keeps one λ for every set, the largest whose training accuracy is at
   most ``slack`` points below the view's most accurate single worker; ``"budget"`` keeps the combination of most
   right answers whose $ per training question is at most ``budget`` × that worker's (``choose``; one value per
   view). ``escalate = "strongest"`` lets a second round call only that worker. Measured (docs/results.md,
   "Replay"): the knapsack over-fitted GSM8K's escalation target; one λ with escalation to the strongest held on
   held-out questions.
4. **The rows.** For every training question and view: the round-1 prompt with the chosen first round, and the
   round-2 prompt — built exactly as the executor builds it from those answers — with the chosen action. One label
   per (set, view, state), whatever the question: a rule the policy can learn from the question's kind and the
   agreement line, not a per-question oracle it cannot see.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conductor.answers import agreement
from conductor.pool import Pool, WorkerSpec
from conductor.workflow import render_completion
from schemas.plan import StepAnswer, Workflow
from services.learner.config import LearnerConfig
from services.learner.episodes import Episode, first_round, messages, next_round
from services.learner.rewards import ConductorReward
from services.learner.search import SOLVE
from tasks.finals import step_answer
from tasks.problem import Problem

STATES = ("agree", "differ", "missing")
"""What a second round is shown of the first (conductor.answers.agreement)."""

KIND = {
    "replay-math-l5": "a competition mathematics problem",
    "replay-gsm": "a grade-school math word problem",
    "replay-crux": "a question about the output of a Python program",
    "replay-mmlu-redux": "a multiple-choice knowledge question",
}


@dataclass(frozen=True, slots=True)
class Cell:
    """One worker's single answer to one question, as the rollout API scored it."""

    reward: float  # 1 right, 0.5 wrong (a parsed workflow's reward, docs/method.md §3)
    cost: float
    response: str
    answer: str | None  # what a second round shows of it (tasks/finals.py)

    @property
    def correct(self) -> float:
        """1.0 when right: the search maximises accuracy (the reward of a parsed workflow is 0.5 + 0.5 x it)."""
        return 1.0 if self.reward >= 1.0 else 0.0


Matrix = dict[str, dict[str, Cell]]
"""problem id -> worker name -> its cell."""


@dataclass(frozen=True, slots=True)
class Cascade:
    """A two-round policy in worker names: ``first`` answer independently; then, per state, a worker answers afresh
    (its name) or the first round's answer is handed back (None)."""

    first: tuple[str, ...]
    then: tuple[tuple[str, str | None], ...]

    def action(self, state: str) -> str | None:
        return dict(self.then).get(state)

    def play(self, cells: Mapping[str, Cell]) -> tuple[float, float, bool, str]:
        """(right, $, escalated, state) on one question: ``play``, as every rule family answers it."""
        return play(self, cells)

    def label(self) -> str:
        acts = ", ".join(f"{s}→{w or 'hand back'}" for s, w in self.then)
        return f"[{' + '.join(self.first)}] then {acts}"


@dataclass
class Outcome:
    reward: float = 0.0
    cost: float = 0.0
    n: int = 0
    escalated: int = 0
    states: Counter = field(default_factory=Counter)

    def add(self, reward: float, cost: float, escalated: bool, state: str) -> None:
        self.reward += reward
        self.cost += cost
        self.n += 1
        self.escalated += escalated
        self.states[state] += 1

    @property
    def accuracy(self) -> float:
        return self.reward / self.n if self.n else 0.0

    @property
    def mean_cost(self) -> float:
        return self.cost / self.n if self.n else 0.0


def state_of(cells: Mapping[str, Cell], first: Sequence[str]) -> str:
    return agreement([cells[w].answer for w in first])


def play(c: Cascade, cells: Mapping[str, Cell]) -> tuple[float, float, bool, str]:
    """(reward, $, escalated, state) of ``c`` on one question."""
    state = state_of(cells, c.first)
    cost = sum(cells[w].cost for w in c.first)
    worker = c.action(state)
    if worker is None:
        return cells[c.first[-1]].correct, cost, False, state
    return cells[worker].correct, cost + cells[worker].cost, True, state


def evaluate(rule: Any, matrix: Matrix, ids: Sequence[str]) -> Outcome:
    """``rule`` (a ``Cascade``, or any rule with the same ``play``: three_round.ThreeRound) on the questions ``ids``."""
    out = Outcome()
    for pid in ids:
        out.add(*rule.play(matrix[pid]))
    return out


def first_rounds(workers: Sequence[int], cheap: int) -> list[tuple[int, ...]]:
    """Every first round searched, in worker indices of a price-ordered view (cheapest first): one worker; two
    (either order: the last one's answer stands); three of the ``cheap`` cheapest."""
    workers = list(workers)
    singles = [(w,) for w in workers]
    pairs = list(itertools.permutations(workers, 2))
    triples = list(itertools.combinations(workers[:cheap], 3))
    return [*singles, *pairs, *triples]


@dataclass(frozen=True)
class Tables:
    """One set's questions as arrays over a view's workers (in ``workers`` order): rewards, $, and which answers
    were stated and agree, so every cascade's sums are a few vector operations."""

    workers: tuple[str, ...]
    reward: np.ndarray  # [question, worker]: 1 right, 0 wrong
    cost: np.ndarray  # [question, worker]
    stated: np.ndarray  # [question, worker] bool
    same: np.ndarray  # [question, worker, worker] bool: both stated and the same answer

    @classmethod
    def of(cls, matrix: Matrix, ids: Sequence[str], workers: Sequence[str]) -> Tables:
        rows = [[matrix[pid][w] for w in workers] for pid in ids]
        answers = [[c.answer for c in row] for row in rows]
        k = len(workers)
        same = np.zeros((len(ids), k, k), dtype=bool)
        for q, ans in enumerate(answers):
            for a, b in itertools.combinations(range(k), 2):
                if agreement([ans[a], ans[b]]) == "agree":
                    same[q, a, b] = same[q, b, a] = True
            for a in range(k):
                same[q, a, a] = ans[a] is not None
        return cls(
            workers=tuple(workers),
            reward=np.array([[c.correct for c in row] for row in rows], dtype=float).reshape(len(ids), k),
            cost=np.array([[c.cost for c in row] for row in rows], dtype=float).reshape(len(ids), k),
            stated=np.array([[a is not None for a in ans] for ans in answers], dtype=bool).reshape(
                len(ids), k
            ),
            same=same,
        )

    def states(self, first: Sequence[int]) -> np.ndarray:
        """Each question's state index into ``STATES`` for a first round (``agreement`` of its answers)."""
        stated = self.stated[:, list(first)]
        agree = np.ones(len(self.reward), dtype=bool)
        for a in first[1:]:
            agree &= self.same[:, first[0], a]
        every = stated.all(axis=1)
        return np.where(agree & every, 0, np.where(every | _pairwise_differ(self.same, first), 1, 2))


def _pairwise_differ(same: np.ndarray, first: Sequence[int]) -> np.ndarray:
    """Two stated answers of the first round differ (``agreement`` says ``differ`` even if a third stated none)."""
    out = np.zeros(same.shape[0], dtype=bool)
    for a, b in itertools.combinations(first, 2):
        out |= same[:, a, a] & same[:, b, b] & ~same[:, a, b]
    return out


@dataclass(frozen=True)
class Sums:
    """One first round on one set: per state, the questions' count, the kept answer's reward, and each worker's
    reward and $ summed; and the first round's $ summed. λ then picks each state's action without another pass."""

    first: tuple[int, ...]
    first_cost: float
    count: np.ndarray  # [state]
    keep: np.ndarray  # [state]
    reward: np.ndarray  # [state, worker]
    cost: np.ndarray  # [state, worker]

    @classmethod
    def of(cls, t: Tables, first: tuple[int, ...], escalate: int | None = None) -> Sums:
        """``escalate``: the only worker a second round may call (its index); None: any."""
        st = t.states(first)
        onehot = np.stack([st == i for i in range(len(STATES))]).astype(float)  # [state, question]
        reward = onehot @ t.reward
        if escalate is not None:  # every other worker's answer is worth nothing: never chosen
            others = np.ones(len(t.workers), dtype=bool)
            others[escalate] = False
            reward[:, others] = -np.inf
        return cls(
            first=first,
            first_cost=float(t.cost[:, list(first)].sum()),
            count=onehot.sum(axis=1),
            keep=onehot @ t.reward[:, first[-1]],
            reward=reward,
            cost=onehot @ t.cost,
        )

    def best(self, lam: float) -> tuple[float, float, tuple[int | None, ...]]:
        """(value, $, action per state: a worker index or None = hand back) at ``lam``; equal values go to the
        cheaper action."""
        values = self.reward - lam * self.cost  # [state, worker]
        actions: list[int | None] = []
        total, spent = -lam * self.first_cost, self.first_cost
        for i in range(len(STATES)):
            w = int(
                np.argmax(values[i])
            )  # the first maximum: workers are in price order, so the cheapest tie
            if self.keep[i] >= values[i, w] - 1e-12:
                actions.append(None)
                total += self.keep[i]
            else:
                actions.append(w)
                total += values[i, w]
                spent += self.cost[i, w]
        return total, spent, tuple(actions)


def best_cascade(t: Tables, sums: Sequence[Sums], lam: float) -> Cascade:
    """The cascade of highest accuracy − ``lam`` × $ on a set: each first round's best action per state."""
    best: tuple[float, float, Sums, tuple[int | None, ...]] | None = None
    for s in sums:
        value, spent, actions = s.best(lam)
        if best is None or value > best[0] + 1e-9 or (value > best[0] - 1e-9 and spent < best[1]):
            best = (value, spent, s, actions)
    assert best is not None
    _, _, s, actions = best
    name = t.workers
    return Cascade(
        first=tuple(name[i] for i in s.first),
        then=tuple((state, None if a is None else name[a]) for state, a in zip(STATES, actions, strict=True)),
    )


@dataclass(frozen=True)
class Choice:
    """The chosen rule per set for one view (a ``Cascade``, or a three_round.ThreeRound), and its figures on the
    questions it was chosen on."""

    view: tuple[str, ...]
    per_set: dict[str, Any]
    figures: dict[str, Any]


def frontier(
    t: Tables, sums: Sequence[Sums], matrix: Matrix, ids: Sequence[str]
) -> list[tuple[float, float, Cascade]]:
    """One set's efficient cascades — (right answers, $ summed over its questions, cascade) — found as the best one
    at every λ of ``LAMBDAS``, each kept once."""
    found: dict[Cascade, tuple[float, float]] = {}
    for lam in LAMBDAS:
        c = best_cascade(t, sums, lam)
        if c not in found:
            o = evaluate(c, matrix, ids)
            found[c] = (o.reward, o.cost)
    return sorted(((r, cost, c) for c, (r, cost) in found.items()), key=lambda x: (x[1], -x[0]))


@dataclass(frozen=True)
class SetFronts:
    """One view's questions by set, its workers in price order, its strongest single worker, and each set's efficient
    two-round cascades (``frontier``): what ``choose`` selects from, and what other families are compared with."""

    ids_by_set: dict[str, list[str]]
    ordered: list[str]
    strongest: str
    singles: dict[str, Outcome]
    fronts: dict[str, list[tuple[float, float, Cascade]]]

    @property
    def every(self) -> list[str]:
        return [pid for ids in self.ids_by_set.values() for pid in ids]


def set_fronts(
    matrix: Matrix, problems: Sequence[Problem], view: Sequence[str], *, cheap: int = 6, escalate: str = "any"
) -> SetFronts:
    """Workers are ordered by their mean $ on these questions, cheapest first, for ties and the cheap triples;
    ``escalate = "strongest"``: a second round calls only the most accurate single worker."""
    ids_by_set: dict[str, list[str]] = defaultdict(list)
    for p in problems:
        if p.id in matrix:
            ids_by_set[p.benchmark].append(p.id)
    every = [pid for ids in ids_by_set.values() for pid in ids]
    singles = {w: evaluate(Cascade((w,), ()), matrix, every) for w in view}
    ordered = sorted(view, key=lambda w: (singles[w].mean_cost, w))
    strongest = max(view, key=lambda w: (singles[w].accuracy, -singles[w].mean_cost))
    only = ordered.index(strongest) if escalate == "strongest" else None
    firsts = first_rounds(range(len(ordered)), cheap)
    fronts = {}
    for name in sorted(ids_by_set):
        t = Tables.of(matrix, ids_by_set[name], ordered)
        fronts[name] = frontier(t, [Sums.of(t, f, only) for f in firsts], matrix, ids_by_set[name])
    return SetFronts(dict(ids_by_set), ordered, strongest, singles, fronts)


def choose(
    matrix: Matrix,
    problems: Sequence[Problem],
    view: Sequence[str],
    *,
    budget: float,
    cheap: int = 6,
    select: str = "budget",
    slack: float = 1.0,
    escalate: str = "any",
    rounds: int = 2,
) -> Choice:
    """The per-set rules for one view; ``rounds = 3`` adds the three-round family to every set's front
    (services/learner/three_round.py ``extend``). ``select = "budget"``: the combination of most right answers
    whose mean $ is at most ``budget`` × the view's most accurate single worker's (every combination of the sets'
    efficient rules: a few dozen each). ``select = "slack"``: one λ for every set, the largest whose training
    accuracy is at most ``slack`` points below that worker's. ``escalate`` and ``cheap``: ``set_fronts``."""
    sf = set_fronts(matrix, problems, view, cheap=cheap, escalate=escalate)
    if rounds == 3:
        from services.learner.three_round import extend  # it builds on this module

        sf = extend(sf, matrix)
    every, strongest, singles = sf.every, sf.strongest, sf.singles
    sets = sorted(sf.fronts)
    fronts = [sf.fronts[name] for name in sets]
    if select == "slack":
        floor = (singles[strongest].accuracy - slack / 100) * len(every)
        right, spent, chosen = _one_lambda(fronts, floor)
    else:
        right, spent, chosen = within(fronts, budget * singles[strongest].mean_cost * len(every), budget)
    per_set = dict(zip(sets, chosen, strict=True))
    n = len(every)
    figures = {
        "strongest": strongest,
        "strongest_accuracy": round(singles[strongest].accuracy, 4),
        "strongest_cost": singles[strongest].mean_cost,
        "accuracy": round(right / n, 4),
        "cost": spent / n,
        "cost_ratio": round(spent / n / singles[strongest].mean_cost, 4),
        "sets": {
            s: {"cascade": per_set[s].label(), **_figures(evaluate(per_set[s], matrix, sf.ids_by_set[s]))}
            for s in sets
        },
    }
    return Choice(view=tuple(view), per_set=per_set, figures=figures)


Front = list[tuple[float, float, Any]]
"""One set's efficient rules: (right answers, $ summed over its questions, the rule), cheapest first."""


class BudgetError(ValueError):
    """No combination of the sets' cascades costs as little as the budget asks."""


def within(fronts: Sequence[Front], cap: float, budget: float) -> tuple[float, float, tuple[Any, ...]]:
    """The combination of one efficient rule per set with most right answers whose $ is at most ``cap``."""
    best: tuple[float, float, tuple[Any, ...]] | None = None
    for combo in itertools.product(*fronts):
        right, spent = sum(x[0] for x in combo), sum(x[1] for x in combo)
        if spent <= cap and (
            best is None or right > best[0] + 1e-9 or (right > best[0] - 1e-9 and spent < best[1])
        ):
            best = (right, spent, tuple(x[2] for x in combo))
    if best is None:
        raise BudgetError(f"no cascade costs at most {budget} x the best single worker's $ on this view")
    return best


def _one_lambda(fronts: Sequence[Front], floor: float) -> tuple[float, float, tuple[Cascade, ...]]:
    """Each set's best cascade at one λ (right answers − λ × $), for the largest λ of ``LAMBDAS`` whose right answers
    reach ``floor``; λ = 0 (the most accurate) when none does."""
    best: tuple[float, float, tuple[Cascade, ...]] | None = None
    for lam in LAMBDAS:
        combo = [max(front, key=lambda x: (x[0] - lam * x[1], -x[1])) for front in fronts]
        right, spent = sum(x[0] for x in combo), sum(x[1] for x in combo)
        if best is None or right >= floor - 1e-9:
            best = (right, spent, tuple(x[2] for x in combo))
    assert best is not None
    return best


LAMBDAS = (0.0, *(10.0 ** (e / 8) for e in range(-16, 49)))
"""λ in right answers per $: 0 (accuracy alone, the cheaper of equals), then 0.01 ... 1,000,000 in steps of 10^(1/8)."""


def _figures(o: Outcome) -> dict[str, Any]:
    return {
        "accuracy": round(o.accuracy, 4),
        "cost": o.mean_cost,
        "escalated": round(o.escalated / o.n, 4) if o.n else 0.0,
        "states": dict(o.states),
        "n": o.n,
    }


# --- the answer matrix ------------------------------------------------------------------------------------------


def answer_matrix(
    problems: Sequence[Problem],
    pool: Pool,
    workers: Sequence[str],
    reward: ConductorReward,
    *,
    chunk: int = 256,
) -> tuple[Matrix, int]:
    """Each worker alone on each question through the rollout API; (matrix, masked rollouts). A question with a
    masked rollout (a verifier or worker failure) is left out of the matrix, and counted."""
    view = list(workers)
    specs = pool.subset(view)
    jobs = [(p, i) for p in problems for i in range(len(view))]
    cells: dict[str, dict[str, Cell]] = defaultdict(dict)
    masked: set[str] = set()
    for start in range(0, len(jobs), chunk):
        part = jobs[start : start + chunk]
        eps = [first_round(p, view) for p, _ in part]
        texts = [first_completion((i,), p, specs) for p, i in part]  # the subtask the cascade's workflows ask
        for (p, i), s in zip(part, reward.score(eps, texts), strict=True):
            if s.result.reward is None or not s.result.steps:
                masked.add(p.id)
                continue
            response = s.result.steps[-1].response
            cells[p.id][view[i]] = Cell(
                reward=s.result.reward,
                cost=s.result.usage.cost_usd,
                response=response,
                answer=step_answer(response, p.domain),
            )
    return {pid: row for pid, row in cells.items() if pid not in masked and len(row) == len(view)}, len(
        masked
    )


def dump_matrix(matrix: Matrix) -> dict[str, dict[str, list[Any]]]:
    """The matrix as JSON-ready lists (``answer_matrix.json`` of a run), read back by ``load_matrix``."""
    return {
        pid: {w: [c.reward, c.cost, c.response, c.answer] for w, c in row.items()}
        for pid, row in matrix.items()
    }


def load_matrix(raw: Mapping[str, Mapping[str, Sequence[Any]]], problems: Sequence[Problem]) -> Matrix:
    """A kept matrix, each answer read again from its response (tasks/finals.py as it is now: what the executor
    will show a second round)."""
    domain = {p.id: p.domain for p in problems}
    return {
        pid: {
            w: Cell(
                reward=float(v[0]),
                cost=float(v[1]),
                response=str(v[2]),
                answer=step_answer(str(v[2]), domain[pid]),
            )
            for w, v in row.items()
        }
        for pid, row in raw.items()
        if pid in domain
    }


# --- the rows ---------------------------------------------------------------------------------------------------


def label(worker: WorkerSpec) -> str:
    """How a row names a worker before its number: its description up to the first colon ("OpenAI GPT-4o mini (July
    2024)"), the words the prompt's card starts with. A policy taught the numbers alone learned them, not the view:
    two views number the same workers one apart (docs/results.md, "Replay"); a name it copies, then looks up, is the
    same in every view."""
    text = (worker.description or worker.name).split(":")[0].strip()
    return text or worker.name


def named(ordinals: Sequence[int], workers: Sequence[WorkerSpec]) -> str:
    parts = [f"{label(workers[o])} is Model {o}" for o in ordinals]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"


def first_completion(
    first: Sequence[int], problem: Problem, workers: Sequence[WorkerSpec], strongest: int | None = None
) -> str:
    """Round 1: the question's kind, the view's strongest worker (``strongest``, an ordinal of ``workers``: which
    view this is, said before anything depends on it), then the workers that answer, each named before its number."""
    kind = KIND.get(problem.benchmark, "a question")
    why = f"This is {kind}."
    if strongest is not None:
        why += f" The strongest model here is {label(workers[strongest])}, Model {strongest}."
    if len(first) == 1:
        why += f" {named(first, workers)}; it answers it alone."
    else:
        then = "a stronger model" if strongest is None else f"Model {strongest}"
        why += f" {named(first, workers)}; they answer it independently; if their answers differ, {then} decides."
    wf = Workflow(model_id=list(first), subtasks=[SOLVE] * len(first), access_list=[[] for _ in first])
    return render_completion(why, wf)


def second_completion(state: str, action: int | None, workers: Sequence[WorkerSpec]) -> str:
    said = {
        "agree": "The steps gave the same final answer",
        "differ": "The steps gave different final answers",
        "missing": "A step gave no final answer",
    }[state]
    return decision(said, action, workers)


def decision(said: str, action: int | None, workers: Sequence[WorkerSpec]) -> str:
    """A later round's completion: what it was shown (``said``), then hand back (``action`` None: three empty
    lists) or that worker answers the question afresh."""
    if action is None:
        return render_completion(
            f"{said}, so the result stands.", Workflow(model_id=[], subtasks=[], access_list=[])
        )
    wf = Workflow(model_id=[action], subtasks=[SOLVE], access_list=[[]])
    return render_completion(f"{said}, so {named([action], workers)}; it answers the question afresh.", wf)


def rows(
    choices: Sequence[Choice],
    problems: Sequence[Problem],
    matrix: Matrix,
    pool: Pool,
    config: LearnerConfig,
    *,
    limit: int = 0,
    seed: int = 0,
    first_weight: int = 1,
) -> list[dict[str, Any]]:
    """SFT rows of every round a chosen rule plays, for every question of the matrix on every chosen view (a
    three-round rule's from its ``episodes``); with ``limit``, that many
    drawn evenly over the groups (``balanced``), a first round's group ``first_weight`` times as often."""
    grouped: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for v, choice in enumerate(choices):
        view = list(choice.view)
        specs = pool.subset(view)
        strongest = view.index(choice.figures["strongest"])
        for p in problems:
            if p.id not in matrix or p.benchmark not in choice.per_set:
                continue
            cells, c = matrix[p.id], choice.per_set[p.benchmark]
            if not isinstance(c, Cascade):  # a rule of another family plays its own rounds
                for group, episode, text in c.episodes(p, cells, view, specs, strongest):
                    grouped[(v, p.benchmark, group)].append(_row(episode, text, pool, config))
                continue
            first = [view.index(w) for w in c.first]
            ep = first_round(p, view)
            text1 = first_completion(first, p, specs, strongest)
            grouped[(v, p.benchmark, "first")].append(_row(ep, text1, pool, config))
            answers = [
                StepAnswer(step=k, model_id=o, answer=cells[w].answer)
                for k, (o, w) in enumerate(zip(first, c.first, strict=True))
            ]
            second = next_round(ep, text1, cells[c.first[-1]].response, answers)
            state = state_of(cells, c.first)
            action = c.action(state)
            text2 = second_completion(state, None if action is None else view.index(action), specs)
            grouped[(v, p.benchmark, state)].append(_row(second, text2, pool, config))
    if limit and limit < sum(len(g) for g in grouped.values()):
        weights = [first_weight if key[2] == "first" else 1 for key in grouped]
        return balanced(list(grouped.values()), limit, seed, weights)
    return [r for g in grouped.values() for r in g]


def balanced(
    groups: Sequence[Sequence[dict[str, Any]]], limit: int, seed: int, weights: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """``limit`` rows taken in turn from each group (view, set, round and the state a second round is shown), each
    group shuffled, a group ``weights[i]`` rows a turn: a rare state — the first round's answers differ, so the
    strong worker is called — gets as many rows as a common one until it runs out. A uniform sample of 320 rows gave
    "differ" a handful, and the trained policy handed back where it should escalate (docs/results.md, "Replay")."""
    rng = random.Random(seed)
    queues = [rng.sample(list(g), len(g)) for g in groups]
    turns = list(weights) if weights is not None else [1] * len(queues)
    out: list[dict[str, Any]] = []
    while len(out) < limit and any(queues):
        for q, w in zip(queues, turns, strict=True):
            for _ in range(w):
                if q and len(out) < limit:
                    out.append(q.pop())
    rng.shuffle(out)
    return out


def _row(ep: Episode, text: str, pool: Pool, config: LearnerConfig) -> dict[str, Any]:
    return {
        "prompt": messages(ep, pool, config.data),
        "completion": [{"role": "assistant", "content": text}],
    }
