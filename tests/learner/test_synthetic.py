"""The cold start's synthetic completions: every one parses, and the corpus varies topology, wording and routing."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conductor.workflow import parse_completion
from services.learner import synthetic


@pytest.mark.parametrize("domain", ["math", "mcq", "code", "general"])
def test_every_first_round_completion_parses(domain: str) -> None:
    rng = random.Random(domain)
    for _ in range(400):
        k = rng.randint(1, 5)
        text = synthetic.first_round(rng, k, domain)
        workflow = parse_completion(text, n_workers=k).workflow
        assert 1 <= len(workflow) <= 5
        assert all(0 <= m < k for m in workflow.model_id)


def test_every_second_round_completion_parses_and_some_hand_back() -> None:
    rng = random.Random(1)
    lengths = Counter()
    for _ in range(200):
        k = rng.randint(1, 5)
        lengths[
            len(
                parse_completion(
                    synthetic.second_round(rng, k, "math"), n_workers=k, allow_empty=True
                ).workflow
            )
        ] += 1
    assert lengths[0] > 50 and lengths[1] > 50  # hand back, or check and correct


def test_corpus_varies_topology_wording_and_routing() -> None:
    rng = random.Random(2)
    texts = [synthetic.first_round(rng, 3, "math") for _ in range(300)]
    parsed = [parse_completion(t, n_workers=3).workflow for t in texts]
    shapes = Counter(tuple("all" if a == "all" else len(a) for a in w.access_list) for w in parsed)
    assert {(0,), (0, "all"), (0, 0, "all"), (0, 0, 0, "all"), (0, "all", "all")} <= set(shapes)
    assert len({s for w in parsed for s in w.subtasks}) > 30
    ids = Counter(m for w in parsed for m in w.model_id)
    assert min(ids.values()) > 0.25 * max(ids.values())  # random routing: every ordinal is used


def test_topologies_can_be_restricted() -> None:
    rng = random.Random(3)
    for _ in range(50):
        text = synthetic.first_round(rng, 2, "mcq", topologies=["single"])
        assert len(parse_completion(text, n_workers=2).workflow) == 1
