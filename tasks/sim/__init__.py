"""The ``sim`` task family: thousands of generated questions that sim workers answer and the real verifiers score.

Public API (what the eval runner and the learner use)::

    from tasks import sim
    sim.tasks("train")      # list[Problem]: question (answer-format instruction included), reference, domain
    sim.tasks("test")       # the fixed held-out split (20% of each domain, seeded)
    sim.pool_path()         # the sim pool file: five workers whose best choice depends on the domain
    sim.dataset_path()      # the workers' dataset {id, domain, question, answer, wrong[]} beside it

Domains: ``math`` (integer/fraction answers, boxed), ``mcq`` (four options, an ``Answer: X`` line) and ``code``
(stdin programs and ``Solution`` methods; a worker's answer is a program the code verifier runs, correct or one of
the buggy twins). Regenerate the shipped dataset after changing a generator with
``python -m tasks.sim.regenerate``; a test fails while the shipped file and the generators disagree.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

from tasks.problem import Problem
from tasks.sim.family import HELD_OUT, SEED, SPLITS, SimError, drafts, problem, select

__all__ = ["HELD_OUT", "SEED", "SPLITS", "SimError", "dataset_path", "pool_path", "tasks"]

POOL_FILE = "sim_pool.toml"
DATASET_FILE = "sim_tasks.jsonl"


@functools.cache
def _drafts(seed: int) -> tuple:
    return tuple(drafts(seed))


def tasks(split: str = "test", *, seed: int = SEED) -> list[Problem]:
    """The family's ``split`` ("train", "test" or "all") as ``Problem``s, in a stable order.

    Only the shipped seed matches the shipped worker dataset; another seed is for experiments that write their
    own dataset (``tasks.sim.family.dataset_bytes``).
    """
    return [problem(d) for d in select(list(_drafts(seed)), split, seed)]


def data_dir() -> Path:
    return Path(str(resources.files("tasks") / "data"))


def pool_path() -> Path:
    """The shipped sim pool: pass it as ``--pool`` to ``conductor eval`` / ``serve all`` (CONDUCTOR_POOL_FILE)."""
    return data_dir() / POOL_FILE


def dataset_path() -> Path:
    return data_dir() / DATASET_FILE
