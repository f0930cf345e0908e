"""Serve-to-learn (services/executor/recording.py): with CONDUCTOR_RECORD_PATH set, served solves that carry a
reference append the answers of their independent steps to a replay table; nothing else is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.app.runtime import create_services, running, service_names
from conductor.client import ConductorClient
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.plan import Access
from schemas.solve import RoundRecord, SolveRequest, StepRecord
from services.executor.messages import build_messages
from services.executor.recording import answered_alone
from services.planner.baselines import PROPOSE
from tasks import registry
from tasks.recording import read_table

pytestmark = pytest.mark.e2e

POOL = Path("tasks/data/sim_pool.toml")


def _step(index: int, access: Access) -> StepRecord:
    return StepRecord(index=index, model_id=0, worker="w", subtask="s", access=access)


@pytest.mark.parametrize(
    "rnd, index, access, alone",
    [
        (0, 0, [], True),
        (0, 0, "all", True),  # the first step of the first round: "all" grants nothing
        (0, 2, [], True),
        (0, 2, [0], False),
        (0, 2, "all", False),
        (1, 0, [], True),
        (1, 0, "all", False),  # a later round's "all" grants the previous round's answer
    ],
)
def test_which_steps_answered_the_question_alone(rnd: int, index: int, access: Access, alone: bool) -> None:
    assert answered_alone(RoundRecord(round=rnd, policy="p"), _step(index, access)) is alone


async def test_served_solves_with_a_reference_are_recorded(
    nats_url: str, subject_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "served.jsonl.gz"
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(POOL),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_RECORD_PATH": str(table),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    p = next(p for p in registry.load_benchmark("sim") if p.domain == "math")
    ask = {"question": p.question, "domain": p.domain, "policy": "moa:3", "max_steps": 4, "progress": False}
    settings = CommonSettings.from_env(env)
    async with running(create_services(service_names("all"), env), settings, name="stl"):
        async with ConductorClient(settings) as client:
            kept = await client.solve(SolveRequest(**ask, task_id="kept", reference=p.reference), timeout=60)
            await client.solve(SolveRequest(**ask, task_id="no-reference"), timeout=60)
    assert kept.error is None and len(kept.workflows[0].steps) == 4
    [(key, rec)] = read_table(table).items()
    proposers = [s.worker for s in kept.workflows[0].steps[:3]]  # the aggregator saw them: not recorded
    assert key == ("served", "kept") and set(rec.answers) == set(proposers)
    fmt = load_pool(POOL).answer_format.for_step(p.domain, p.question, PROPOSE, final=False)
    [message] = build_messages(p.question, PROPOSE, [], answer_format=fmt)
    assert rec.prompt == message.content and rec.gold == p.reference.answer and rec.domain == "math"
    steps = {s.worker: s for s in kept.workflows[0].steps[:3]}
    assert all(
        a.text == steps[w].response and a.output_tokens == steps[w].usage.output_tokens
        for w, a in rec.answers.items()
    )
    assert oct(table.stat().st_mode & 0o777) == "0o600"
