"""The sim workers' knowledge of the fixtures is in sync with the fixtures, and a run's pool is the sim pool's
workers over exactly the run's questions."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from conductor.pool import load_pool
from evaluation import simanswers
from services.worker_adapter.providers.sim import extract_answer
from tasks import registry, sim
from tasks.sim.family import WorkerRecord


def test_shipped_answers_match_the_fixtures() -> None:
    """Regenerate with `python -m evaluation.simanswers` after changing a fixture."""
    assert simanswers.answers_path().read_bytes() == simanswers.answers_bytes(simanswers.fixture_records())


def test_every_fixture_question_is_known_with_a_distinct_wrong_answer() -> None:
    decoder = msgspec.json.Decoder(WorkerRecord)
    known = {r.question: r for r in map(decoder.decode, simanswers.answers_path().read_bytes().splitlines())}
    for name in registry.sim_benchmarks():
        for problem in registry.load_benchmark(name):
            record = known[problem.question]
            assert record.id == problem.id and record.wrong and record.answer not in record.wrong


def test_code_answers_are_programs_a_sim_worker_fences() -> None:
    [record] = [r for r in simanswers.fixture_records() if r.id == "livecodebench/9002"]
    assert record.domain == "code"
    assert extract_answer(f"ok\n```python\n{record.answer}\n```") == record.answer
    assert "Solution.isEven = __wrapped" in record.wrong[0]


def test_run_pool_is_the_sim_pool_over_the_runs_questions(tmp_path: Path) -> None:
    problems = registry.load_benchmark("mmlu") + registry.load_benchmark("sim")[:3]
    path = simanswers.run_pool(tmp_path, problems)
    pool, base = load_pool(path), load_pool(sim.pool_path())
    assert pool.names() == base.names()
    for worker, original in zip(pool.workers, base.workers, strict=True):
        assert worker.sim is not None and original.sim is not None
        assert (
            worker.sim.skill == original.sim.skill
            and worker.price_out_per_mtok == original.price_out_per_mtok
        )
        assert pool.resolve(worker.sim.dataset) == tmp_path / "answers.jsonl" and worker.sim.vary_by_task
    lines = (tmp_path / "answers.jsonl").read_bytes().splitlines()
    assert [msgspec.json.decode(line)["question"] for line in lines] == [p.question for p in problems]


@pytest.mark.parametrize("answer, wrong", [("24", ["25", "23", "51"]), ("(-\\infty,3)", ["0", "1", "-1"])])
def test_wrong_text_answers(answer: str, wrong: list[str]) -> None:
    assert simanswers._wrong_text(answer, "math", None) == wrong
