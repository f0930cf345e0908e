"""Issue 21, item 1: one strategy grammar. The same name builds the same workflow at every door — `conductor
eval`, the gateway's ``model``, `conductor solve --policy` — and a name that does not parse is the grammar's one
error everywhere."""

from __future__ import annotations

import pytest

from conductor.app.cli import _strategy
from conductor.strategy import GRAMMAR, MOA_PROPOSERS, StrategyError, parse_strategy
from evaluation.errors import UnknownStrategyError
from evaluation.strategies import parse_strategies
from services.gateway.errors import GatewayError
from services.gateway.protocol import ChatCompletionRequest, ChatMessageIn
from services.gateway.translation import solve_request
from services.planner.baselines import parse_baseline, plan_baseline

POOL = ["sim-frontier", "sim-math", "sim-knowledge", "sim-coder", "sim-small"]
NAMES = [
    "moa",
    "moa:3",
    "refine:3@sim-math",
    "consensus:5",
    "consensus:2@sim-knowledge",
    "single:sim-coder",
    "moa+r1",
]


def _workflow(policy: str, max_steps: int | None):
    return plan_baseline(parse_baseline(policy), n_workers=len(POOL), max_steps=max_steps or 5).workflow


def _doors(name: str):
    """(policy, max_steps, max_rounds) as each door turns the name into a request."""
    (ev,) = parse_strategies(name, POOL)
    gw = solve_request(
        ChatCompletionRequest(model=name, messages=[ChatMessageIn(role="user", content="q")]), POOL, "t-1"
    )
    cli = _strategy(name, POOL)
    return {
        "eval": (ev.policy, ev.max_steps, ev.max_rounds),
        "gateway": (gw.policy, gw.max_steps, gw.max_rounds),
        "cli": (cli.policy, cli.max_steps, cli.max_rounds),
    }


@pytest.mark.parametrize("name", NAMES)
def test_the_same_name_builds_the_same_workflow_everywhere(name):
    doors = _doors(name)
    assert len(set(doors.values())) == 1, doors
    policy, max_steps, _ = doors["eval"]
    assert _workflow(policy, max_steps) == _workflow(*doors["gateway"][:2]) == _workflow(*doors["cli"][:2])


def test_moa_is_the_papers_one_proposer_layer_and_an_aggregator_everywhere():
    """docs/method.md §7: 8 calls on the paper's 7-worker pool; 7 proposers cycling over a smaller pool here."""
    for door, (policy, max_steps, _) in _doors("moa").items():
        wf = _workflow(policy, max_steps)
        assert len(wf) == MOA_PROPOSERS + 1, door
        assert wf.access_list == [[]] * MOA_PROPOSERS + ["all"], door


@pytest.mark.parametrize("bad", ["moa:0", "refine:x", "single", "mixture", "single:nobody", "moa@sim-math"])
def test_a_name_that_does_not_parse_is_one_error_at_every_door(bad):
    with pytest.raises(StrategyError) as grammar:
        parse_strategy(bad, POOL)
    with pytest.raises(UnknownStrategyError) as evaluation:
        parse_strategies(bad, POOL)
    with pytest.raises(GatewayError) as gateway:
        solve_request(
            ChatCompletionRequest(model=bad, messages=[ChatMessageIn(role="user", content="q")]), POOL, "t"
        )
    with pytest.raises(StrategyError) as cli:
        _strategy(bad, POOL)
    message = str(grammar.value)
    assert str(evaluation.value) == str(cli.value) == message
    assert message in gateway.value.message and gateway.value.status == 404
    if "malformed" in message or "unknown" in message:
        assert GRAMMAR in message


def test_the_cli_reads_names_from_the_deployments_pool(monkeypatch):
    monkeypatch.delenv("CONDUCTOR_POOL", raising=False)  # the bundled demo pool
    assert _strategy("single:sim-math", None).policy == "single:1"
    assert _strategy(None, None) is None
