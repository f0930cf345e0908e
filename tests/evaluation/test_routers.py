"""The routers (evaluation/routers.py) on hand-built answer tables whose right choice is known, RouterBench's AIQ on
known hulls, and `conductor eval --strategy routers,moa` end to end through the services on the sim pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.app.cli import main
from evaluation import routers
from evaluation.errors import EvalError
from evaluation.knn import TfidfIndex
from evaluation.routers import Answer, Question, RouterSpec
from evaluation.simanswers import run_pool
from tasks import registry
from tests.evaluation.conftest import evaluate

WORKERS = ["cheap-a", "cheap-b", "strong"]
COST = {"cheap-a": 0.001, "cheap-b": 0.002, "strong": 0.05}


def q(
    qid: str, right: set[str], finals: dict[str, str | None] | None = None, *, set_: str = "x", text: str = ""
) -> Question:
    finals = finals or {}
    return Question(
        id=qid,
        set=set_,
        text=text or qid,
        answers={
            w: Answer(
                correct=w in right, final=finals.get(w, "ok" if w in right else f"bad-{w}"), cost=COST[w]
            )
            for w in WORKERS
        },
    )


def train_table() -> list[Question]:
    """cheap-a is right on every apple question, cheap-b on every integral; strong on 3 of 4 of each."""
    strong = [{"strong"} if i % 4 else set() for i in range(8)]
    apples = [
        q(f"a{i}", {"cheap-a"} | s, set_="x", text=f"apples pears {i} fruit basket")
        for i, s in enumerate(strong)
    ]
    integrals = [
        q(f"i{i}", {"cheap-b"} | s, set_="y", text=f"integral dx calculus {i}") for i, s in enumerate(strong)
    ]
    return apples + integrals


def fitted(*specs: RouterSpec) -> routers.Fitted:
    return routers.fit(specs or [RouterSpec(kind=k) for k in routers.KINDS], train_table(), WORKERS)


def test_best_single_is_the_most_accurate_on_train_and_per_set_the_best_of_each_set() -> None:
    f = fitted()
    # per set: cheap-a 100% on x, cheap-b 100% on y; overall (mean of sets) each cheap one 50%, strong 75%
    assert f.chosen["router:best"] == "strong"
    assert f.chosen["router:per-set"] == "x: cheap-a, y: cheap-b"
    test = q("t", {"cheap-a"}, set_="x")
    assert f.routers["router:best"](test).answered_by == "strong"
    choice = f.routers["router:per-set"](test)
    assert (choice.answered_by, choice.correct, choice.cost) == ("cheap-a", True, COST["cheap-a"])
    other = f.routers["router:per-set"](q("u", {"strong"}, set_="never-seen"))
    assert other.answered_by == "strong"  # a set train never saw: the best single worker


def test_vote_is_a_plurality_ties_to_the_pools_first_and_no_answer_abstains() -> None:
    route = routers.vote(WORKERS)
    two_to_one = route(q("t", {"cheap-b", "strong"}, {"cheap-a": "7", "cheap-b": "5", "strong": "5.0"}))
    assert (two_to_one.answered_by, two_to_one.correct) == ("cheap-b", True)  # 5 and 5.0 are one answer
    assert two_to_one.cost == pytest.approx(sum(COST.values())) and two_to_one.called == WORKERS
    tie = route(q("t", {"cheap-b"}, {"cheap-a": None, "cheap-b": "2", "strong": "3"}))
    assert tie.answered_by == "cheap-b"  # cheap-a abstains; 1–1: the first of the tied in pool order
    nobody = route(q("t", {"strong"}, {"cheap-a": None, "cheap-b": None, "strong": None}))
    assert (nobody.answered_by, nobody.correct) == ("cheap-a", False)


def test_cascade_keeps_an_agreement_and_escalates_a_disagreement() -> None:
    f = fitted(RouterSpec(kind="cascade"))
    assert f.chosen["router:cascade"] == "cheap-a + cheap-b, disagreements to strong"
    route = f.routers["router:cascade"]
    agree = route(q("t", set(), {"cheap-a": "\\frac{1}{2}", "cheap-b": "\\dfrac{1}{2}", "strong": "1/2"}))
    assert (agree.answered_by, agree.called, agree.correct) == ("cheap-a", ["cheap-a", "cheap-b"], False)
    assert agree.cost == pytest.approx(COST["cheap-a"] + COST["cheap-b"])
    differ = route(q("t", {"strong"}, {"cheap-a": "1", "cheap-b": "2"}))
    assert (differ.answered_by, differ.correct) == ("strong", True)
    assert differ.cost == pytest.approx(sum(COST.values()))
    missing = route(q("t", {"strong"}, {"cheap-a": None, "cheap-b": None}))
    assert missing.answered_by == "strong"  # two silences are no agreement


def test_a_named_cascade_and_bad_router_names() -> None:
    spec = routers.parse_router("router:cascade:strong+cheap-b>cheap-a", WORKERS)
    assert spec == [RouterSpec(kind="cascade", cheap=("strong", "cheap-b"), strong="cheap-a")]
    assert spec[0].label == "router:cascade:strong+cheap-b>cheap-a"
    assert [s.kind for s in routers.parse_router("routers", WORKERS)] == list(routers.KINDS)
    for bad, message in [
        ("router:magic", "unknown router"),
        ("router:vote:3", "unknown router"),
        ("router:cascade:a>b", r"router:cascade:A\+B>C"),
        ("router:cascade:cheap-a+gpt-9>strong", "not in the run's pool"),
        ("router:cascade:cheap-a+cheap-a>strong", "must differ"),
    ]:
        with pytest.raises(EvalError, match=message):
            routers.parse_router(bad, WORKERS)


def test_oracle_takes_the_cheapest_right_worker_or_is_wrong_at_the_cheapest_cost() -> None:
    route = routers.oracle(WORKERS)
    right = route(q("t", {"cheap-b", "strong"}))
    assert (right.answered_by, right.correct, right.cost) == ("cheap-b", True, COST["cheap-b"])
    wrong = route(q("t", set()))
    assert (wrong.answered_by, wrong.correct, wrong.cost) == ("cheap-a", False, COST["cheap-a"])


def test_knn_picks_the_worker_that_was_right_on_near_questions() -> None:
    train = train_table()
    price = routers.prices(train, WORKERS)
    index = TfidfIndex([t.text for t in train])
    assert set(index.nearest("how many apples in the fruit basket", 3)) <= set(range(8))
    route = routers.knn_router(index, train, WORKERS, price, k=5, lam=0.0)
    assert route(q("t", {"cheap-a"}, text="a basket of apples")).answered_by == "cheap-a"
    assert route(q("t", {"cheap-b"}, text="the integral of x dx")).answered_by == "cheap-b"
    fit = routers.fit_knn(train, WORKERS, price)
    assert fit.fold_accuracy == 1.0  # near questions name the right cheap worker in every fold
    f = fitted(RouterSpec(kind="knn"))
    assert f.routers["router:knn"](q("t", {"cheap-b"}, text="calculus: integral dx")).correct


def test_fit_rejects_no_train_and_a_one_worker_pool() -> None:
    with pytest.raises(EvalError, match="no train answers"):
        routers.fit([RouterSpec(kind="best")], [], WORKERS)
    with pytest.raises(EvalError, match="at least two workers"):
        routers.fit([RouterSpec(kind="best")], train_table(), ["strong"])


@pytest.mark.parametrize(
    "points, lo, hi, expected",
    [
        ([(0.5, 0.8)], 0.0, 1.0, 0.4),  # nothing below its cost, flat after it
        ([(0.0, 0.5), (1.0, 1.0)], 0.0, 1.0, 0.75),  # one segment
        ([(0.0, 0.5), (0.5, 0.6), (1.0, 1.0)], 0.0, 1.0, 0.75),  # a point under the hull changes nothing
        ([(0.0, 0.5), (0.5, 0.9), (1.0, 1.0)], 0.0, 1.0, 0.825),  # a point above it lifts it
        ([(0.0, 1.0), (1.0, 0.5)], 0.0, 1.0, 1.0),  # non-decreasing: a dearer, worse point is ignored
        ([(2.0, 0.5), (4.0, 1.0)], 2.0, 6.0, 0.875),  # the range, not the cost, is normalised
    ],
)
def test_aiq_on_known_hulls(points: list[tuple[float, float]], lo: float, hi: float, expected: float) -> None:
    assert routers.aiq(points, lo, hi) == pytest.approx(expected)


def test_hull_vertices() -> None:
    pts = [(0.0, 0.5), (0.5, 0.6), (0.5, 0.9), (1.0, 1.0), (2.0, 0.7)]
    assert routers.hull(pts) == [(0.0, 0.5), (0.5, 0.9), (1.0, 1.0)]
    with pytest.raises(ValueError, match="hi > lo"):
        routers.aiq(pts, 1.0, 1.0)


# ---- end to end ------------------------------------------------------------------------------------------------


@pytest.fixture
def env(
    nats_url: str, subject_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The sim workers over both sim splits: the routers' calibration asks them train questions."""
    problems = [*registry.load_benchmark("sim"), *registry.load_benchmark("sim:train")]
    values = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(run_pool(tmp_path / "pool", problems)),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


@pytest.mark.e2e
async def test_routers_beside_moa_through_the_services(services: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ("--benchmark", "sim", "--strategy", "routers,moa", "--limit", "4", "--train-limit", "12")
    _, new, results = await evaluate(out, *argv, "--pool", services["CONDUCTOR_POOL"])
    workers = ["sim-frontier", "sim-math", "sim-knowledge", "sim-coder", "sim-small"]
    assert len(new) == 4 * (1 + len(workers)) + 12 * len(workers)  # moa + singles on test, singles on train
    labels = [f"router:{k}" for k in routers.KINDS]
    assert results.strategies == ["moa", *(f"single:{w}" for w in workers), *labels]
    for label in labels:
        row = results.row(label, "sim")
        assert row is not None and row.items == 4
    singles = {
        w: {it.item: it for it in new if it.strategy == f"single:{w}" and it.benchmark == "sim"}
        for w in workers
    }
    vote = results.row("router:vote", "sim")
    assert vote is not None and vote.cost_per_question == pytest.approx(
        sum(it.cost_usd for by_item in singles.values() for it in by_item.values()) / 4
    )
    oracle, best = (
        results.row("router:oracle", "sim"),
        max(results.row(f"single:{w}", "sim").accuracy.mean for w in workers),
    )
    assert oracle is not None and oracle.accuracy.mean >= best  # the oracle is right wherever any worker is
    assert results.aiq_workers is not None and results.aiq["router:oracle"] >= results.aiq_workers
    assert "router:knn" in results.meta and "12 train questions" in results.meta["routers calibrated on"]
    html = (out / "report.html").read_text()
    assert "router:cascade" in html and "AIQ" in html
    _, again, _ = await evaluate(out, *argv, "--pool", services["CONDUCTOR_POOL"])
    assert again == []  # calibration and singles resume like any item; routers are composed again


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--benchmark", "sim:train", "--strategy", "routers"], "score them on another split of sim"),
        (["--benchmark", "sim", "--strategy", "router:nope"], "unknown router 'router:nope'"),
        (["--benchmark", "math500", "--strategy", "routers"], "no question apart from those evaluated"),
    ],
)
def test_bad_router_input_exits_2_naming_it(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert main(["eval", "--embedded", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
