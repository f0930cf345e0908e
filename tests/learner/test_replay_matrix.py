"""The in-process answer matrix (conductor/app/replay_matrix.py) is the rollout API's, cell for cell: the same
rewards, answers and $ for each worker alone on each question, on the shipped replay pool."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from conductor.app.replay_matrix import NotReplayError, offline_matrix, replay_only
from conductor.app.training import local_rollouts
from conductor.pool import load_pool
from services.learner import cascade
from services.learner.bridge import LoopThread
from services.learner.recipes import load_recipe
from services.learner.rewards import ConductorReward
from services.learner.stream import load_run_pool, shares
from tasks import sim

pytestmark = [pytest.mark.nats, pytest.mark.timeout(600)]

WORKERS = ["o1-mini-2024-09-12", "gpt-4o-mini-2024-07-18", "Meta-Llama-3.1-8B-Instruct"]


def test_offline_cells_equal_the_rollout_apis(tmp_path: Path, nats_url: str, subject_prefix: str) -> None:
    config = load_recipe("smollm2-replay").stages[0].config
    config = msgspec.structs.replace(config, output=msgspec.structs.replace(config.output, dir=str(tmp_path)))
    pool = load_run_pool(config)
    mix = shares(config, "train")
    problems = [p for share in mix for p in share.problems[:3]]  # three questions of each set
    offline, masked = asyncio.run(offline_matrix(problems, pool, WORKERS))
    assert masked == 0 and set(offline) == {p.id for p in problems}
    with (
        LoopThread() as loop,
        local_rollouts(loop, config, nats_url=nats_url, prefix=subject_prefix) as score,
    ):
        served, masked = cascade.answer_matrix(problems, pool, WORKERS, ConductorReward(score, config))
    assert masked == 0 and set(served) == set(offline)
    for pid, row in served.items():
        for worker, cell in row.items():
            mine = offline[pid][worker]
            assert (mine.reward, mine.response, mine.answer) == (cell.reward, cell.response, cell.answer)
            assert mine.cost == pytest.approx(cell.cost, rel=1e-9)


def test_a_pool_with_other_workers_is_refused() -> None:
    pool = load_pool(sim.pool_path())
    with pytest.raises(NotReplayError, match="replay workers only"):
        replay_only(pool, pool.names())
