"""The routers people use, composed from graded single answers: best single, best per set, majority vote, a fixed
cascade, a kNN router and the oracle — and RouterBench's AIQ to rank them on the cost–quality plane.

Every worker of the pool answers every question once, alone (``single:NAME``, through the services); a router is
then a rule that says which of those calls it would have made and whose answer it returns. That composition is
exact, not a simulation: none of these routers' calls sees another call's output, so the call a router makes is the
call ``single:NAME`` made. A router's cost is the sum of the calls it would have made; its outcome is the verdict
of the answer it returns. Choices are calibrated on the train split's answers only (``fit``), never on the
questions they are scored on.

A worker's *price* is its mean $ per train question (what it really charged on this workload, not a list price),
so the cheap pair of the cascade and the λ·price of the kNN router need nothing but the answers.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

import msgspec

from evaluation.errors import EvalError
from evaluation.knn import TfidfIndex
from tasks.answers import normalize_text

KINDS = ("best", "per-set", "vote", "cascade", "knn", "oracle")
"""Every router, in the order a run lists them; ``routers`` names them all."""

KNN_KS = (1, 3, 5, 10, 20, 40)
KNN_LAMBDAS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
KNN_FOLDS = 5
KNN_TOLERANCE = 0.01
"""kNN's (k, λ) is chosen on train alone, by ``KNN_FOLDS``-fold cross-validation: the cheapest setting whose fold
accuracy is within one point of the best setting's (λ = 0 alone would always win on accuracy; one point is the
margin issue 33 allows a cheaper router against the best single worker)."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's graded answer to one question, as ``single:NAME`` gave it."""

    correct: bool
    final: str | None  # the verifier's extracted final answer; None: it stated none (it abstains from a vote)
    cost: float


class Question(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    set: str  # the benchmark it is scored under (a train question: the benchmark it calibrates)
    text: str
    answers: dict[str, Answer]  # worker -> its answer; every worker of the pool


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    """What a router did on one question: the calls it made, in order, and whose answer it returned."""

    called: list[str]
    answered_by: str
    correct: bool
    cost: float


Router = Callable[[Question], Choice]


class RouterSpec(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    cheap: tuple[str, ...] = ()  # cascade: the two first workers (default: the two lowest-priced on train)
    strong: str | None = None  # cascade: the escalation worker (default: the best single worker on train)

    @property
    def label(self) -> str:
        if self.kind == "cascade" and (self.cheap or self.strong):
            return f"router:cascade:{'+'.join(self.cheap)}>{self.strong}"
        return f"router:{self.kind}"


_CASCADE = re.compile(r"(?P<a>[^+>]+)\+(?P<b>[^+>]+)>(?P<c>[^+>]+)")
GRAMMAR = (
    "routers, or router:KIND with KIND one of "
    + ", ".join(KINDS)
    + " (router:cascade:A+B>C names the workers)"
)


def parse_router(text: str, workers: Sequence[str]) -> list[RouterSpec]:
    """``routers`` (all six) or ``router:KIND`` / ``router:cascade:A+B>C``; workers must be in the run's pool."""
    text = text.strip()
    if text == "routers":
        return [RouterSpec(kind=k) for k in KINDS]
    kind, _, arg = text.removeprefix("router:").partition(":")
    if not text.startswith("router:") or kind not in KINDS or (arg and kind != "cascade"):
        raise EvalError(f"unknown router {text!r}; expected {GRAMMAR}")
    if not arg:
        return [RouterSpec(kind=kind)]
    m = _CASCADE.fullmatch(arg)
    if m is None:
        raise EvalError(
            f"router {text!r}: a cascade is router:cascade:A+B>C (two cheap workers, then a strong one)"
        )
    named = [m.group(g).strip() for g in "abc"]
    unknown = [w for w in named if w not in workers]
    if unknown:
        raise EvalError(f"router {text!r} names worker(s) {unknown} not in the run's pool {list(workers)}")
    if named[0] == named[1]:
        raise EvalError(f"router {text!r}: the two cheap workers must differ")
    return [RouterSpec(kind="cascade", cheap=(named[0], named[1]), strong=named[2])]


def vote_key(final: str | None) -> str | None:
    """Answers a vote counts as the same: equal exact-match normal forms (tasks/answers.py), numbers by value."""
    if final is None:
        return None
    text = normalize_text(final)
    try:
        return repr(float(text.replace(",", "")))
    except ValueError:
        return text or None


# ---- calibration on train -------------------------------------------------------------------------------------


def prices(train: Sequence[Question], workers: Sequence[str]) -> dict[str, float]:
    """Each worker's mean $ per train question."""
    return {w: statistics.fmean(q.answers[w].cost for q in train) for w in workers}


def accuracy(questions: Sequence[Question], worker: str) -> float:
    """Mean over sets of the worker's accuracy in each set (each benchmark counts once, as the eval's average)."""
    by_set: dict[str, list[bool]] = defaultdict(list)
    for q in questions:
        by_set[q.set].append(q.answers[worker].correct)
    return statistics.fmean(sum(v) / len(v) for v in by_set.values())


def best_worker(questions: Sequence[Question], workers: Sequence[str], price: Mapping[str, float]) -> str:
    """The most accurate worker; ties to the lower price, then pool order."""
    return min(workers, key=lambda w: (-accuracy(questions, w), price[w], workers.index(w)))


def _answer(q: Question, worker: str, called: Sequence[str]) -> Choice:
    return Choice(
        called=list(called),
        answered_by=worker,
        correct=q.answers[worker].correct,
        cost=sum(q.answers[w].cost for w in dict.fromkeys(called)),
    )


def single(worker: str) -> Router:
    return lambda q: _answer(q, worker, [worker])


def per_set(train: Sequence[Question], workers: Sequence[str], price: Mapping[str, float]) -> Router:
    """The best worker of each set on train; a set train never saw gets the best single worker."""
    fallback = best_worker(train, workers, price)
    sets: dict[str, list[Question]] = defaultdict(list)
    for q in train:
        sets[q.set].append(q)
    chosen = {s: best_worker(qs, workers, price) for s, qs in sets.items()}
    return lambda q: _answer(q, chosen.get(q.set, fallback), [chosen.get(q.set, fallback)])


def vote(workers: Sequence[str]) -> Router:
    """Plurality of the stated final answers; a worker that stated none abstains; ties (and a vote nobody cast) go
    to the pool's first worker among the tied. The answer returned is the first worker's (pool order) that stated
    the winning answer."""

    def route(q: Question) -> Choice:
        keys = {w: vote_key(q.answers[w].final) for w in workers}
        counts: dict[str, int] = defaultdict(int)
        for k in keys.values():
            if k is not None:
                counts[k] += 1
        if not counts:
            return _answer(q, workers[0], workers)
        top = max(counts.values())
        winner = next(w for w in workers if keys[w] is not None and counts[keys[w]] == top)
        return _answer(q, winner, workers)

    return route


def cascade(cheap: tuple[str, str], strong: str) -> Router:
    """Both cheap workers answer; when they state the same final answer it stands (the first's), otherwise — a
    different answer, or either stated none — the strong worker answers (a call not paid twice if it is one of
    the cheap pair)."""
    a, b = cheap

    def route(q: Question) -> Choice:
        ka, kb = vote_key(q.answers[a].final), vote_key(q.answers[b].final)
        if ka is not None and ka == kb:
            return _answer(q, a, [a, b])
        return _answer(q, strong, [a, b, strong])

    return route


def oracle(workers: Sequence[str]) -> Router:
    """The cheapest worker (on this question) that is right; none right: wrong, at the cheapest call's cost."""

    def route(q: Question) -> Choice:
        order = sorted(workers, key=lambda w: (q.answers[w].cost, workers.index(w)))
        right = [w for w in order if q.answers[w].correct]
        return _answer(q, right[0] if right else order[0], [right[0] if right else order[0]])

    return route


class KnnFit(msgspec.Struct, frozen=True, kw_only=True):
    k: int
    lam: float
    fold_accuracy: float
    fold_cost: float


def _knn_pick(
    near: Sequence[Question], workers: Sequence[str], price: Mapping[str, float], lam: float
) -> str:
    """The worker with the best accuracy on ``near`` minus ``lam`` × its price relative to the dearest worker's;
    ties to the lower price, then pool order."""
    top = max(price.values()) or 1.0
    score = {
        w: sum(n.answers[w].correct for n in near) / max(len(near), 1) - lam * price[w] / top for w in workers
    }
    return min(workers, key=lambda w: (-score[w], price[w], workers.index(w)))


def knn_router(
    index: TfidfIndex,
    train: Sequence[Question],
    workers: Sequence[str],
    price: Mapping[str, float],
    k: int,
    lam: float,
) -> Router:
    """For a question, its ``k`` nearest train questions (TF-IDF cosine, evaluation/knn.py) choose the worker."""

    def route(q: Question) -> Choice:
        pick = _knn_pick([train[i] for i in index.nearest(q.text, k)], workers, price, lam)
        return _answer(q, pick, [pick])

    return route


def fit_knn(train: Sequence[Question], workers: Sequence[str], price: Mapping[str, float]) -> KnnFit:
    """(k, λ) by ``KNN_FOLDS``-fold cross-validation on train (fold = position mod ``KNN_FOLDS``: deterministic)."""
    if len(train) < 2:
        raise EvalError(f"the kNN router needs at least 2 train questions, got {len(train)}")
    folds = min(KNN_FOLDS, len(train))
    neighbours: list[list[Question]] = [[] for _ in train]  # each train question's nearest in the other folds
    for f in range(folds):
        rest = [i for i in range(len(train)) if i % folds != f]
        index = TfidfIndex([train[i].text for i in rest])
        for i in range(f, len(train), folds):
            neighbours[i] = [train[rest[j]] for j in index.nearest(train[i].text, max(KNN_KS))]
    scores: list[KnnFit] = []
    for k in KNN_KS:
        for lam in KNN_LAMBDAS:
            picks = [(q, _knn_pick(neighbours[i][:k], workers, price, lam)) for i, q in enumerate(train)]
            scores.append(
                KnnFit(
                    k=k,
                    lam=lam,
                    fold_accuracy=statistics.fmean(q.answers[w].correct for q, w in picks),
                    fold_cost=statistics.fmean(q.answers[w].cost for q, w in picks),
                )
            )
    best = max(s.fold_accuracy for s in scores)
    near_best = [s for s in scores if s.fold_accuracy >= best - KNN_TOLERANCE]
    return min(near_best, key=lambda s: (s.fold_cost, -s.fold_accuracy, s.k, s.lam))


class Fitted(msgspec.Struct, frozen=True, kw_only=True):
    """The routers a run calibrated, and what each chose (for the report)."""

    routers: dict[str, Router]  # label -> router
    chosen: dict[str, str]  # label -> a one-line description of its calibrated choice


def fit(specs: Sequence[RouterSpec], train: Sequence[Question], workers: Sequence[str]) -> Fitted:
    """Calibrate every router of ``specs`` on the train answers."""
    if not train:
        raise EvalError("the routers have no train answers to calibrate on")
    if len(workers) < 2:
        raise EvalError(f"routing needs at least two workers; the run's pool has {list(workers)}")
    price = prices(train, workers)
    best = best_worker(train, workers, price)
    routers: dict[str, Router] = {}
    chosen: dict[str, str] = {}
    for spec in specs:
        match spec.kind:
            case "best":
                routers[spec.label], chosen[spec.label] = single(best), best
            case "per-set":
                routers[spec.label] = per_set(train, workers, price)
                sets = sorted({q.set for q in train})
                picks = {s: best_worker([q for q in train if q.set == s], workers, price) for s in sets}
                chosen[spec.label] = ", ".join(f"{s}: {w}" for s, w in picks.items())
            case "vote":
                routers[spec.label], chosen[spec.label] = vote(workers), f"{len(workers)} workers"
            case "cascade":
                strong = spec.strong or best
                others = [w for w in workers if w != strong or len(workers) < 3]
                pair = spec.cheap or tuple(sorted(others, key=lambda w: (price[w], workers.index(w)))[:2])
                routers[spec.label] = cascade((pair[0], pair[1]), strong)
                chosen[spec.label] = f"{pair[0]} + {pair[1]}, disagreements to {strong}"
            case "knn":
                found = fit_knn(train, workers, price)
                index = TfidfIndex([q.text for q in train])
                routers[spec.label] = knn_router(index, train, workers, price, found.k, found.lam)
                chosen[spec.label] = (
                    f"k={found.k}, λ={found.lam:g} (train folds: {100 * found.fold_accuracy:.1f}%)"
                )
            case "oracle":
                routers[spec.label], chosen[spec.label] = oracle(workers), "the cheapest right worker"
    return Fitted(routers=routers, chosen=chosen)


# ---- RouterBench's AIQ ----------------------------------------------------------------------------------------


def hull(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-decreasing convex hull of (cost, quality) points: the upper concave envelope from the cheapest
    point up to the best one (flat after it). Its value at a cost is the best quality a random mix of the points
    reaches at that mean cost — RouterBench's argument for interpolating between routers."""
    best_at: dict[float, float] = {}
    for x, y in points:
        best_at[x] = max(y, best_at.get(x, y))
    upper: list[tuple[float, float]] = []
    for p in sorted(best_at.items()):
        while len(upper) >= 2 and _cross(upper[-2], upper[-1], p) >= 0:
            upper.pop()
        upper.append(p)
    if not upper:
        return []
    top = max(range(len(upper)), key=lambda i: (upper[i][1], -i))
    return upper[: top + 1]


def _cross(o: tuple[float, float], a: tuple[float, float], b: tuple[float, float]) -> float:
    """> 0 when o→a→b turns left (b above the line o→a): a is then under the hull."""
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def aiq(points: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    """RouterBench's Average Improvement in Quality (Hu et al., "RouterBench: A Benchmark for Multi-LLM Routing
    System", arXiv:2403.12031, §3.3): the area under the non-decreasing convex hull of the (cost, quality) points
    over the cost range [lo, hi], normalised to [0, 1] — ``1/(hi-lo) ∫ hull(c) dc``. Below the cheapest point the
    hull is 0 (no mix costs that little); after the best one it stays flat. Every AIQ of a run uses one range (its
    cheapest and dearest strategy), so they compare. The hull is piecewise linear: the integral is exact."""
    if not hi > lo:
        raise ValueError(f"AIQ needs a cost range with hi > lo, got [{lo}, {hi}]")
    line = hull(points)
    if not line:
        return 0.0
    area = 0.0
    for (x0, y0), (x1, y1) in itertools.pairwise(line):
        a, b = max(x0, lo), min(x1, hi)
        if a < b:
            slope = (y1 - y0) / (x1 - x0)
            area += (b - a) * (y0 + slope * (a - x0) + y0 + slope * (b - x0)) / 2
    last_x, last_y = line[-1]
    area += max(0.0, hi - max(last_x, lo)) * last_y
    return area / (hi - lo)
