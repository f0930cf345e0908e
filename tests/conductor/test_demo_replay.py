"""`conductor demo --replay`: real models' recorded answers conducted offline, every workflow printed, the best
single worker measured beside it in the same run."""

from __future__ import annotations

import io
import json
import sys

import pytest
from rich.console import Console

from conductor import policies
from conductor.app import demo_replay
from conductor.app.cli import main
from conductor.app.render import round_line
from conductor.pool import PoolError, load_pool
from schemas.solve import RoundRecord, SolveResult, StepRecord
from schemas.usage import Usage, UsageSummary
from schemas.verify import Verdict
from tasks import replay
from tasks.finals import step_answer


def test_the_best_single_worker_is_o1_mini_else_claude() -> None:
    assert demo_replay.best_single(load_pool(demo_replay.shipped_pool())) == "o1-mini-2024-09-12"
    no_o1 = load_pool(demo_replay.shipped_pool("replay_pool_no_o1.toml"))
    assert demo_replay.best_single(no_o1) == "claude-3-5-sonnet-20241022"


@pytest.mark.parametrize(
    ("pool", "says"),
    [("sim_pool.toml", "not replay: "), ("mmlu_pool.toml", "have no replay-math-l5 answers of")],
)
def test_a_pool_the_demo_cannot_run_is_refused_in_one_line(pool: str, says: str, capsys) -> None:
    with pytest.raises(PoolError, match=says):
        demo_replay.check_pool(load_pool(demo_replay.shipped_pool(pool)), {})
    assert main(["demo", "--replay-pool", str(demo_replay.shipped_pool(pool))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("conductor demo: ") and says in err and "\n" not in err


def test_the_sample_is_fixed_and_drawn_from_the_test_splits() -> None:
    first = demo_replay.demo_problems(2, seed=0)
    assert [p.id for p in first] == [p.id for p in demo_replay.demo_problems(2, seed=0)]
    assert [p.benchmark for p in first] == [e for e in demo_replay.ENTRIES for _ in range(2)]
    assert all(replay.in_test_split(p.benchmark.removeprefix("replay-"), p.id) for p in first)
    assert [p.id for p in demo_replay.demo_problems(2, seed=1)] != [p.id for p in first]


def _step(index: int, worker: str, answer: str, access: object = ()) -> StepRecord:
    return StepRecord(
        index=index,
        model_id=index,
        worker=worker,
        subtask="solve it",
        access=list(access) if access != "all" else "all",  # type: ignore[arg-type]
        response=f'{{"reasoning": "...", "answer": "{answer}"}}',
        usage=Usage(cost_usd=0.001, calls=1),
    )


FIRST = RoundRecord(
    round=0, policy="local:replay", card_rounds=1, steps=[_step(0, "cheap-a", "7"), _step(1, "cheap-b", "8")]
)


def test_a_trained_policy_s_second_round_reads_hand_back_or_escalate() -> None:
    assert round_line(FIRST) == "round 0 · local:replay: cheap-a → 7; cheap-b → 8"
    back = RoundRecord(round=1, policy="local:replay", handback=True)
    assert round_line(back) == "round 1 · local:replay: hand back (the first round's answer stands)"
    up = RoundRecord(round=1, policy="local:replay", steps=[_step(0, "o1", "7", "all")])
    assert round_line(up) == "round 1 · local:replay: escalate to o1: o1 [all] → 7"
    fell = RoundRecord(round=1, policy="moa", fallback_used=True, handback=True)
    assert round_line(fell).startswith("round 1 · moa (fallback): hand back")


def test_the_summary_counts_escalations_and_prices_against_the_single_worker() -> None:
    problem = demo_replay.demo_problems(1, seed=0)[0]
    verdict = Verdict(id="v", outcome="correct", reason="ok")
    total = UsageSummary(total=Usage(cost_usd=0.003, calls=3))
    up = RoundRecord(round=1, policy="local:replay", steps=[_step(0, "o1", "7", "all")])
    escalated = SolveResult(task_id="t", workflows=[FIRST, up], usage=total, verdict=verdict)
    back = RoundRecord(round=1, policy="local:replay", handback=True)
    handed = SolveResult(task_id="u", workflows=[FIRST, back], usage=total)
    alone = SolveResult(
        task_id="s", usage=UsageSummary(total=Usage(cost_usd=0.002, calls=1)), verdict=verdict
    )
    rows = [demo_replay.question_json(problem, r, alone) for r in (escalated, handed)]
    assert [q["correct"] for q in rows] == [True, False]
    assert rows[0]["rounds"][1]["steps"][0] == {
        "worker": "o1",
        "access": "all",
        "answer": "7",
        "error": None,
        "cost_usd": 0.001,
    }
    s = demo_replay.summarize(rows, "o1", 1.0, lower_bound=True)
    assert (s["second_rounds"], s["escalated"], s["correct"]) == (2, 1, 1)
    assert s["cost_ratio"] == pytest.approx(0.006 / 0.004)
    assert s["single"] == {"worker": "o1", "correct": 2, "cost_usd": pytest.approx(0.004)}


@pytest.mark.e2e
async def test_three_questions_with_the_moa_fallback(nats_url, subject_prefix, monkeypatch) -> None:
    # Not capsys: the services configure logging onto the stream they find, which capsys closes after the test.
    out, stdout = io.StringIO(), io.StringIO()
    monkeypatch.setattr(demo_replay, "Console", lambda **_kw: Console(file=out, width=300))
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CONDUCTOR_SUBJECT_PREFIX", subject_prefix)
    monkeypatch.delenv("CONDUCTOR_POLICY", raising=False)  # resolved as a user's would be ...
    monkeypatch.setattr(policies, "defaults", lambda: [])  # ... before any replay policy is registered
    assert await demo_replay.run_replay_demo(per_set=1) == 0
    assert (
        await demo_replay.run_replay_demo(per_set=1, as_json=True) == 0
    )  # the same questions again, as JSON
    printed = out.getvalue()
    assert "Conductor: baseline:moa (no registered policy covers this pool's workers" in printed
    assert "No trained Conductor for this pool here" in printed
    found = json.loads(stdout.getvalue())
    assert found["trained"] is False and found["resolution"].startswith(
        "Conductor: baseline:moa (no registered"
    )
    questions = found["questions"]
    assert [q["set"] for q in questions] == list(demo_replay.ENTRIES)
    index = replay.load_index()
    pool = {w.name: w.replay.model for w in load_pool(demo_replay.shipped_pool()).workers if w.replay}
    lines = printed.splitlines()
    for q in questions:
        (head,) = [i for i, ln in enumerate(lines) if ln.startswith(f"{q['set']} {q['id']}: ")]
        verdict = "right" if q["correct"] else "wrong"
        assert lines[head].startswith(f"{q['set']} {q['id']}: {verdict}, $"), lines[head]
        assert "(alone: " in lines[head]
        (rnd,) = q["rounds"]  # MoA runs one round: its proposers, then an aggregator that saw them all
        assert rnd["policy"] == "moa" and not rnd["handback"] and len(rnd["steps"]) >= 2
        assert rnd["steps"][-1]["access"] == "all"
        record = index.get(q["set"].removeprefix("replay-"), q["id"])
        shown = []
        for s in rnd["steps"]:  # behaviour "own": every step is its model's recorded answer, verbatim
            recorded = record.answers[pool[s["worker"]]].text
            assert s["answer"] == step_answer(recorded)  # (a domain only matters for mcq)
            shown.append(
                f"{s['worker']}{' [all]' if s['access'] == 'all' else ''} → {s['answer'] or 'no answer'}"
            )
        assert lines[head + 1] == "    round 0 · moa: " + "; ".join(shown)
        assert q["single"]["cost_usd"] > 0 and q["cost_usd"] > q["single"]["cost_usd"]  # 5 calls against 1
    summary = found["summary"]
    assert summary["total"] == 3 and summary["errors"] == 0 and summary["second_rounds"] == 0
    assert summary["correct"] == sum(q["correct"] for q in questions)
    assert summary["cost_usd"] == pytest.approx(sum(q["cost_usd"] for q in questions))
    assert summary["single"]["worker"] == "o1-mini-2024-09-12"
    assert "o1-mini-2024-09-12 alone (the best single worker, same questions, same run): " in printed
