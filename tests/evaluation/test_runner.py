"""The runner's resume rule: a rerun skips items finished under the same task version, and only those."""

from __future__ import annotations

from pathlib import Path

import msgspec

from evaluation.records import append
from evaluation.runner import Job, Options, Runner
from evaluation.strategies import Strategy
from schemas.verify import TextReference
from tasks.problem import Problem
from tests.evaluation.items import item


def test_an_item_of_another_task_version_runs_again(tmp_path: Path) -> None:
    """A benchmark whose definition changed (its version in tasks/registry.py) is run anew, not mixed in."""
    runner = Runner(None, tmp_path, Options())  # type: ignore[arg-type]  # no client: nothing is solved here
    older = item("s", "x", 0, 0, True)  # recorded before versions, or under another one
    same = msgspec.structs.replace(item("s", "x", 0, 1, True), version="2")
    for it in (older, same):
        append(runner.items_path, it)
    strategy = Strategy(label="s", policy="baseline:single", max_steps=1)
    jobs = [
        Job(
            "x",
            strategy,
            0,
            Problem(
                id=f"q{n}", benchmark="x", question="?", reference=TextReference(answer="1"), domain="math"
            ),
            "2",
        )
        for n in (0, 1)
    ]
    todo, done = runner.pending(jobs)
    assert [j.problem.id for j in todo] == ["q0"] and list(done) == [same.key]


def test_hide_domain_asks_without_the_answer_type_and_keeps_the_reference() -> None:
    """`conductor eval --hide-domain`: the request a client that names no answer type sends (a plain chat request to
    the gateway); the verifier still judges by the reference."""
    from evaluation.runner import request

    problem = Problem(id="q", benchmark="x", question="?", reference=TextReference(answer="1"), domain="math")
    job = Job("x", Strategy(label="s", policy="baseline:single", max_steps=1), 0, problem, "2")
    assert request(job, "r", Options()).domain == "math"
    hidden = request(job, "r", Options(hide_domain=True))
    assert hidden.domain is None and hidden.reference == problem.reference


def test_a_conductor_item_of_another_policy_runs_again(tmp_path: Path) -> None:
    """The resolved policy is part of a `conductor` item's resume key (conductor/policies.py): resumed with another
    policy, its items run again; a baseline's items do not depend on it."""
    from conductor.policies import REGISTRY

    ours = REGISTRY["smollm2-views3"].record()
    # another policy: other weights under another name (only the default is registered now: issue 35)
    other = msgspec.structs.replace(ours, name="smollm2-other", adapter_sha256="sha256:" + "0" * 64)
    runner = Runner(None, tmp_path, Options(policy=ours))  # type: ignore[arg-type]  # nothing is solved here
    conductor, moa = Strategy(label="conductor", policy=None), Strategy(label="moa", policy="moa")
    recorded = {0: ours, 1: other, 2: None}  # item n was planned by this policy (None: an older run's item)
    for n, policy in recorded.items():
        append(runner.items_path, msgspec.structs.replace(item("conductor", "x", 0, n, True), policy=policy))
        append(runner.items_path, item("moa", "x", 0, n, True))

    def job(strategy: Strategy, n: int) -> Job:
        problem = Problem(
            id=f"q{n}", benchmark="x", question="?", reference=TextReference(answer="1"), domain="math"
        )
        return Job("x", strategy, 0, problem)

    todo, done = runner.pending([job(s, n) for n in recorded for s in (conductor, moa)])
    assert [(j.strategy.label, j.problem.id) for j in todo] == [("conductor", "q1"), ("conductor", "q2")]
    assert {k for k in done if k[1] == "conductor"} == {("x", "conductor", 0, "q0")} and len(done) == 4
