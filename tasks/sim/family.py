"""The ``sim`` family assembled: every generator's drafts, ids, the fixed train/held-out split, the worker dataset.

Generation is a pure function of the seed (``random.Random`` streams, one per generator, derived by name), so the
same seed gives byte-identical tasks in any process and on any machine. The split is per domain (a fixed share of
each held out), so both halves have the same domain mix and a learner judged on "test" never saw those questions.
"""

from __future__ import annotations

import random
from collections import Counter

import msgspec

from tasks.errors import TaskError
from tasks.problem import Problem
from tasks.sim import codegen, mathgen, mcqgen
from tasks.sim.draft import Draft

SEED = 2512
"""The seed of the shipped family (and of the sim workers' dataset file shipped beside the pool)."""

HELD_OUT = 0.2
"""Share of each domain held out as the "test" split."""

SPLITS = ("train", "test", "all")

STREAM_PREFIX = "evaluation.sim."
"""Each generator's random stream is named after its module as the family was first shipped (it lived under
``evaluation/sim/``): the name is part of the seed, so keeping it keeps every generated task, the shipped worker
dataset and the held-out split the trained policies were measured on."""


class SimError(TaskError):
    """A request the sim family cannot serve (an unknown split, a generator that produced a duplicate)."""


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the sim workers' dataset, exactly as services/worker_adapter/providers/sim.py reads it."""

    id: str
    domain: str
    question: str
    answer: str
    wrong: list[str]


def drafts(seed: int = SEED) -> list[Draft]:
    """Every task of the family, in a stable order (generator order, then generation order)."""
    out: list[Draft] = []
    for gen in (*mathgen.GENERATORS, *mcqgen.GENERATORS):
        stream = STREAM_PREFIX + gen.__module__.rpartition(".")[2]
        out.extend(gen(random.Random(f"{seed}:{stream}.{gen.__name__}")))
    out.extend(codegen.generate(random.Random(f"{seed}:code")))
    _check_unique(out)
    return out


def _check_unique(items: list[Draft]) -> None:
    keys = Counter(d.key for d in items)
    questions = Counter(d.question for d in items)
    dup = [k for k, n in keys.items() if n > 1] + [q[:60] for q, n in questions.items() if n > 1]
    if dup:
        raise SimError(f"sim family has duplicate tasks: {dup[:3]}")


def task_id(d: Draft) -> str:
    return f"sim/{d.domain}/{d.key}"


def held_out_ids(items: list[Draft], seed: int = SEED) -> set[str]:
    """The ids of the "test" split: a seeded shuffle of each domain's ids, the first ``HELD_OUT`` share."""
    held: set[str] = set()
    for domain in sorted({d.domain for d in items}):
        ids = sorted(task_id(d) for d in items if d.domain == domain)
        random.Random(f"{seed}:split:{domain}").shuffle(ids)
        held.update(ids[: round(len(ids) * HELD_OUT)])
    return held


def problem(d: Draft) -> Problem:
    return Problem(
        id=task_id(d),
        benchmark="sim",
        question=d.question,
        reference=d.reference,
        domain=d.domain,
        subject=d.subject,
    )


def select(items: list[Draft], split: str, seed: int = SEED) -> list[Draft]:
    if split not in SPLITS:
        raise SimError(f"unknown sim split {split!r}; known: {', '.join(SPLITS)}")
    if split == "all":
        return list(items)
    held = held_out_ids(items, seed)
    return [d for d in items if (task_id(d) in held) == (split == "test")]


def worker_records(items: list[Draft]) -> list[WorkerRecord]:
    return [
        WorkerRecord(id=task_id(d), domain=d.domain, question=d.question, answer=d.answer, wrong=d.wrong)
        for d in items
    ]


def dataset_bytes(seed: int = SEED) -> bytes:
    """The sim workers' dataset file for ``seed``: one JSON record per line."""
    encoder = msgspec.json.Encoder()
    return b"".join(encoder.encode(r) + b"\n" for r in worker_records(drafts(seed)))
