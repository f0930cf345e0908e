"""Proof that it learns: the tiny model, cold-started, then GRPO through the real NATS rollout path on `sim`.

The tiny learning tier (``make test-learn-tiny``; marked ``learn`` and ``nats``: a real nats-server from the session
fixture). Out of the default tier since 2026-11-28: the two runs were 13 of its 25 minutes on a loaded 2-core machine. The executor, planner, worker-adapter
and verifier run in this process on the learner's event-loop thread (conductor/app/training.py), with the sim
pool; the learner sends every completion to the executor's rollout subject and trains on the rewards it gets back.

1. A tiny Llama and its tokenizer are built in code (services/learner/tinymodel.py).
2. Cold start: SFT on 2,000 synthetic one-step workflows with random routing (parse rate 0 -> 0.88-0.97).
3. Held-out reward (64 `sim` test questions, math and mcq, 2 samples each) is measured through the rollout path.
4. GRPO, 60 steps of 8 questions x 8 completions, over NATS.
5. Held-out reward again, on the same questions and views.

The preset is services/learner/presets/tiny-sim.toml (a fixed view of sim-math and sim-knowledge, whose best
choice depends on the domain; 60 steps at lr 3e-4). Measured on this 2-core machine (shared, 200-220 s a run):

    seed  parse: base -> SFT -> after GRPO   held-out reward before -> after (gain)
    0     0.00 -> 0.97 -> 0.94              0.645 -> 0.746 (+0.101)
    1     0.00 -> 0.88 -> 0.91              0.691 -> 0.727 (+0.035)
    2     0.00 -> 0.97 -> 0.90              0.680 -> 0.727 (+0.047)

Training reward (seed 0, means of 10 steps): 0.688, 0.695, 0.723, 0.706, 0.723, 0.748; parse failures 0.145 ->
0.062. The threshold, +0.01, is below the smallest gain measured with margin for CPU nondeterminism (the held-out
measurement itself is fixed: same questions, views and sampling seed before and after). At lr 1e-3 the same run
was unstable (seed 0: 0.645 -> 0.484, the format collapsed on mcq), hence 3e-4.

What 60 steps teach is mostly the format (unparseable workflows score 0) and a little routing: the tiny model's
P(sim-math) at the list position stays near the same for both domains (measured 0.45/0.45 after GRPO; it was
0.51/0.53 after SFT), so domain-dependent routing is not yet learned at this size and budget (docs/learner.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec
import pytest

from conductor.app.training import local_rollouts
from services.learner import pipeline
from services.learner.bridge import LoopThread
from services.learner.config import load_config

pytestmark = [
    pytest.mark.learn,
    pytest.mark.nats,
    pytest.mark.timeout(1800),
]  # ~3 min alone; 14 min measured beside a SmolLM2 run

PRESET = Path(__file__).parents[2] / "services" / "learner" / "presets" / "tiny-sim.toml"

MIN_GAIN = 0.01  # measured gains +0.035 .. +0.101 over seeds 0-2 (module docstring)
MIN_SFT_PARSE = 0.75  # measured 0.88 .. 0.97


def test_grpo_over_nats_raises_held_out_reward(tmp_path: Path, nats_url: str, subject_prefix: str) -> None:
    seed = int(os.environ.get("CONDUCTOR_LEARN_SEED", "0"))
    config = load_config(PRESET)
    config = msgspec.structs.replace(
        config,
        model=msgspec.structs.replace(config.model, seed=seed),
        grpo=msgspec.structs.replace(config.grpo, seed=seed),
        output=msgspec.structs.replace(config.output, dir=str(tmp_path / "run")),
    )
    started = time.monotonic()
    with (
        LoopThread() as loop,
        local_rollouts(loop, config, nats_url=nats_url, prefix=subject_prefix) as score,
    ):
        stages = pipeline.run(config, score)
    before, after = stages["before_grpo"]["held_out"], stages["after_grpo"]["held_out"]
    gain = after["raw_reward_mean"] - before["raw_reward_mean"]
    print(
        f"seed {seed}: parse base {stages['base']['parse_rate']:.2f} sft {stages['sft']['parse_rate']:.2f} "
        f"after {after['parse_rate']:.2f}; held-out reward {before['raw_reward_mean']:.3f} -> "
        f"{after['raw_reward_mean']:.3f} (gain {gain:+.3f}); by domain {before['by_domain']} -> "
        f"{after['by_domain']}; workers {after['workers']}; {time.monotonic() - started:.0f} s"
    )
    assert stages["base"]["parse_rate"] == 0.0
    assert stages["sft"]["parse_rate"] >= MIN_SFT_PARSE
    assert gain >= MIN_GAIN, f"held-out reward rose by {gain:+.3f}, less than {MIN_GAIN}"
    assert (tmp_path / "run" / "metrics.jsonl").is_file() and (tmp_path / "run" / "report.png").is_file()


ROUTE_PRESET = Path(__file__).parents[2] / "services" / "learner" / "presets" / "tiny-route.toml"
MIN_ROUTE_PARSE = 0.85  # measured 1.00 on seeds 0, 1, 2
# The domain's specialist in the workflow (issue 18's measure): 1.00 in both domains on seeds 0, 1, 2 and in a CI run
# that drew other rows. The specialist *first* was asserted until that CI run (2026-11-26): its search let a cheap
# worker solve multiple-choice questions and the knowledge model check them (first step 0.06, in the workflow 1.00,
# 93.8% correct): with 2 draws a candidate and the cost term (60 x $) that pair and the specialist twice are
# near-equal. The sim's draws were then seeded by each rollout's random task id; a rollout's task id is now its id
# (services/executor/rollouts.py), so a seed's search draws the same in every run.
MIN_SPECIALIST_IN = 0.8
MAX_CHANCE = 0.49  # five workers: at most 3 steps of random workers name a given one 1 - (4/5)^3 of the time


def test_the_search_cold_start_teaches_routing_by_domain(
    tmp_path: Path, nats_url: str, subject_prefix: str
) -> None:
    """Issue 18, item 9: the tiny model, cold-started by the search (services/learner/search.py) on the full sim
    pool in pool order, routes each domain to its specialist on held-out questions — the specialist's share of
    workflows rises from chance (at most 49%; the base model writes nothing parseable) to nearly every one, and it
    is a different worker per domain.

    Measured on this 2-core machine (2026-11-25, beside a SmolLM2 run: 8.5-10 min a run, the search 62 s of it),
    192 searched questions -> 192 rows, 10 epochs of SFT; held-out 32 questions x 2:

        seed  search rows (single / solve+check / solve+check+check)   parse   specialist first (math, mcq)   correct   $/q
        0     84 / 107 / 1                                              1.00    1.00, 1.00                     0.922     0.00027
        1     0 / 184 / 8                                               1.00    1.00, 1.00                     0.969     0.00041
        2     5 / 88 / 99                                               1.00    1.00, 1.00                     0.922     0.00050

    Two draws per candidate leave the search's choice of *topology* noisy between seeds (the domain prior decides
    the worker, the draws the number of checks); the routing is learned every time.
    """
    seed = int(os.environ.get("CONDUCTOR_LEARN_SEED", "0"))
    config = load_config(ROUTE_PRESET)
    config = msgspec.structs.replace(
        config,
        model=msgspec.structs.replace(config.model, seed=seed),
        output=msgspec.structs.replace(config.output, dir=str(tmp_path / "run")),
    )
    with (
        LoopThread() as loop,
        local_rollouts(loop, config, nats_url=nats_url, prefix=subject_prefix) as score,
    ):
        stages = pipeline.run(config, score)
    held = stages["before_grpo"]["held_out"]
    share = held["specialist_share"]
    print(
        f"seed {seed}: search {stages['search']['topologies']}; held-out parse {held['parse_rate']:.2f}, "
        f"correct {held['correct_rate']:.3f}, $ {held['usd_per_rollout']:.5f}, specialist {share}"
    )
    assert stages["base"]["parse_rate"] == 0.0
    assert held["parse_rate"] >= MIN_ROUTE_PARSE
    assert set(share) == {"math", "mcq"}
    for domain, got in share.items():
        assert got["any_step"] >= MIN_SPECIALIST_IN > MAX_CHANCE, (domain, got)
