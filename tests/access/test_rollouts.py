"""Rollouts on a secured server (issue 18, item 8; conductor/access.py): the learner, as its own user, puts its
rollouts into the work queue and hears their outcomes; the executors, as theirs, declare the queue, fetch by free
slots, acknowledge and answer — nothing on the way refused, and nothing sent by request/reply instead. What the
other roles may not do with rollouts (forge an outcome, fetch or read the items, send work) is in
tests/access/test_forgeries.py."""

from __future__ import annotations

import pytest

from conductor.pool import load_pool
from conductor.workflow import render_completion
from schemas.plan import Workflow
from schemas.rollout import ROLLOUTS_CONSUMER, Rollout
from schemas.tasks import Names
from services.learner.config import RolloutSection
from services.learner.rollouts import RolloutClient, rollout_transport

pytestmark = pytest.mark.nats

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)


def rollouts(n: int) -> list[Rollout]:
    names = [w.name for w in load_pool(None).workers]
    completion = render_completion(
        "One step.", Workflow(model_id=[1], subtasks=["Solve it."], access_list=[[]])
    )
    return [
        Rollout(
            id=f"r{i}", question=QUESTION, pool=names, completion=completion, reference="2", domain="math"
        )
        for i in range(n)
    ]


async def test_the_learners_rollouts_are_pulled_and_answered_as_each_role(secured, services):
    errors: list[str] = []
    nc = await secured.connect("learner", errors)
    try:
        section = RolloutSection(batch_size=4, timeout_s=60.0, retries=0)
        results = await RolloutClient(rollout_transport(nc, "", section), section).score(rollouts(4))
        info = await nc.jetstream().consumer_info(Names.for_prefix("").rollouts_stream, ROLLOUTS_CONSUMER)
    finally:
        await nc.close()
    assert [r.id for r in results] == ["r0", "r1", "r2", "r3"]
    assert all(r.parsed and r.reward in (0.5, 1.0) and r.error is None for r in results), results
    assert info.delivered.consumer_seq >= 4 and info.num_ack_pending == 0  # pulled, not by request/reply
    assert errors == []
    assert "ermissions violation" not in secured.log()
