"""The sim family: deterministic, split once, shipped file in sync, and every answer scored as intended by the real
verifier — a sim worker's correct answer is correct, each of its wrong answers (buggy programs included) is not."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conductor.pool import load_pool
from schemas.verify import Outcome, VerifyRequest
from services.verifier.core import Verifier
from services.worker_adapter.providers.sim import Dataset, extract_answer, normalize, render
from tasks import sim
from tasks.sim.family import SEED, dataset_bytes, drafts, held_out_ids, task_id
from tests.verifier.conftest import make_settings


def test_family_is_deterministic_and_large() -> None:
    train, test = sim.tasks("train"), sim.tasks("test")
    assert sim.tasks("train") == train
    assert len(train) + len(test) >= 2000
    assert not {p.id for p in train} & {p.id for p in test}
    assert {p.id for p in train} | {p.id for p in test} == {p.id for p in sim.tasks("all")}
    by_domain = Counter(p.domain for p in test)
    assert set(by_domain) == {"math", "mcq", "code"}
    total = Counter(p.domain for p in sim.tasks("all"))
    for domain, n in total.items():  # the held-out share is per domain
        assert abs(by_domain[domain] - n * sim.HELD_OUT) <= 1


def test_split_depends_on_seed_only() -> None:
    items = drafts(SEED)
    assert held_out_ids(items, SEED) == held_out_ids(list(reversed(items)), SEED)
    assert held_out_ids(items, SEED) != held_out_ids(items, SEED + 1)


def test_unknown_split_is_named() -> None:
    with pytest.raises(sim.SimError, match="'validation'"):
        sim.tasks("validation")


def test_shipped_dataset_matches_generators() -> None:
    """Fails when a generator changed without ``python -m tasks.sim.regenerate``."""
    assert sim.dataset_path().read_bytes() == dataset_bytes(SEED)


def test_pool_loads_and_sim_workers_know_every_question() -> None:
    pool = load_pool(sim.pool_path())
    assert len(pool.workers) == 5
    dataset = Dataset.load(pool.resolve(pool.workers[0].sim.dataset))
    for p in random.Random(0).sample(sim.tasks("all"), 200):
        record = dataset.find(p.question + "\n\nSolve it.")
        assert record is not None and record.id == p.id


def test_best_worker_depends_on_domain() -> None:
    pool = load_pool(sim.pool_path())
    best = {d: max(pool.workers, key=lambda w: w.sim.skill.get(d, 0)).name for d in ("math", "mcq", "code")}
    assert len(set(best.values())) == 3


def test_code_answers_round_trip_through_the_sim_output_format() -> None:
    item = next(d for d in drafts() if d.domain == "code")
    text = render("code", item.answer, random.Random(0), review=False)
    assert normalize(extract_answer(text)) == normalize(item.answer)


@pytest.mark.asyncio
async def test_real_verifier_scores_sim_answers_as_intended() -> None:
    """One task of every subject: the correct answer, rendered as a sim worker writes it, is correct; every wrong
    answer is incorrect. Code runs in the verifier's sandbox."""
    per_subject: dict[str, object] = {}
    for d in drafts():
        per_subject.setdefault(d.subject, d)
    requests, expected = [], []
    rng = random.Random(1)
    for d in per_subject.values():
        for n, answer in enumerate([d.answer, *d.wrong]):
            requests.append(
                VerifyRequest(
                    id=f"{task_id(d)}#{n}",
                    response=render(d.domain, answer, rng, review=False),
                    reference=d.reference,
                    question=d.question,
                    domain=d.domain,
                )
            )
            expected.append(Outcome.CORRECT if n == 0 else Outcome.INCORRECT)
    async with Verifier(make_settings()) as verifier:
        verdicts = await verifier.verify_batch(requests)
    wrong = [
        (v.id, v.outcome, v.reason) for v, want in zip(verdicts, expected, strict=True) if v.outcome != want
    ]
    assert not wrong
