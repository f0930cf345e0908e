"""A rollout carries the solve it amounts to (schema 14, ``Rollout.request``) or, written before, its seven fields
at the top level; ``solve`` reads either the same, and a rollout in neither form or in both is refused on decode."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from conductor import wire
from schemas.errors import ErrorCode
from schemas.rollout import Rollout, RolloutBatch
from schemas.solve import SolveRequest

GOLDEN = Path(__file__).parent / "golden"
REQUEST = {"question": "q", "pool": ["sim-math"], "reference": "2"}


def test_both_forms_amount_to_the_same_solve() -> None:
    old = msgspec.json.decode((GOLDEN / "rollout_batch_v4.json").read_bytes(), type=RolloutBatch).rollouts[0]
    new = msgspec.json.decode((GOLDEN / "rollout_batch_v14.json").read_bytes(), type=RolloutBatch).rollouts[0]
    assert old.solve == new.solve and new.solve.max_rounds == 0 and not new.solve.progress
    assert (new.solve.pool, new.solve.budget, new.solve.cache) == (
        ["sim-math", "sim-small"],
        old.budget,
        True,
    )


def test_the_schema_14_form_carries_nothing_of_the_solve_at_the_top_level() -> None:
    r = Rollout(id="a", completion="", request=SolveRequest(**REQUEST))
    assert set(json.loads(msgspec.json.encode(r))) == {
        "id",
        "completion",
        "request",
        "round",
        "previous",
        "policy_version",
    }


@pytest.mark.parametrize(
    ("rollout", "says"),
    [
        ({}, "needs its request (schema 14), or question, pool, reference (schema 13)"),
        ({"question": "q", "pool": ["sim-math"]}, "or reference (schema 13)"),
        ({"request": REQUEST, "domain": None}, "domain is given both in request and at the top level"),
        ({"request": REQUEST, **REQUEST}, "question is given both"),
        ({"request": {"question": "q", "reference": "2"}}, "request.pool: a rollout names the view"),
        ({"request": {"question": "q", "pool": ["sim-math"]}}, "request.reference: a rollout is scored"),
        ({"request": {**REQUEST, "max_rounds": 2}}, "a rollout is one round"),
        ({"request": {**REQUEST, "policy": "moa"}}, "a rollout is one round"),
    ],
)
def test_a_rollout_in_neither_form_or_both_is_a_bad_request(rollout: dict, says: str) -> None:
    payload = json.dumps(
        {"rollouts": [{"id": "ok", "completion": "", **REQUEST}, {"id": "x", "completion": "", **rollout}]}
    )
    with pytest.raises(wire.WireError) as caught:
        wire.decode(payload.encode(), RolloutBatch)
    assert caught.value.info.code == ErrorCode.BAD_REQUEST and caught.value.info.field == "rollouts[1]"
    assert says in caught.value.info.message
