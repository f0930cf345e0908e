"""The training stream: each GRPO step's prompts, as an endless ``datasets.IterableDataset`` TRL samples from.

A step is ``questions_per_step`` first-round questions, each with its own random pool view, then
``recursion_slots`` second rounds taken from the recursion buffer (services/learner/recursion.py); while the buffer
is empty (the first steps) those slots hold plain first rounds, so every step has the same number of prompts —
TRL's batch shape is fixed. The questions are the ``[[data.tasks]]`` mix (``shares``: each registry entry's train
split, tasks/registry.py): each question comes from an entry drawn in proportion to its weight, and each entry
cycles through its own questions, reshuffled each pass, seeded.

A stream rather than a fixed dataset because second rounds only exist once their first rounds are scored. TRL's own
shuffle is turned off (``shuffle_dataset = False``): its buffered shuffle would pull rows ahead of time.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from conductor.pool import Pool, load_pool
from services.learner.config import ConfigError, LearnerConfig, TaskEntry
from services.learner.episodes import Episode, first_round, row, sample_view, view_workers
from services.learner.recursion import RecursionBuffer
from tasks import registry, sim
from tasks.errors import TaskError
from tasks.problem import Problem


def pool_file(config: LearnerConfig) -> Path:
    """The run's pool file: ``data.pool_file`` (else the sim family's), or with ``data.fresh_draws`` its copy in
    ``output.dir`` whose sim workers answer every rollout afresh (``vary_by_task``)."""
    src = Path(config.data.pool_file) if config.data.pool_file else sim.pool_path()
    if not config.data.fresh_draws:
        return src
    return fresh_draw_pool(src, Path(config.output.dir))


def fresh_draw_pool(src: Path, out_dir: Path) -> Path:
    """``out_dir/pool.toml``: ``src`` with every sim worker's dataset made absolute and ``vary_by_task`` on."""
    try:
        text = src.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"data.pool_file: cannot read {src}: {exc}") from exc
    text = re.sub(r"(?m)^vary_by_task\s*=.*$\n?", "", text)

    def absolute(m: re.Match[str]) -> str:
        return f"dataset = {json.dumps(str((src.parent / m.group(1)).resolve()))}\nvary_by_task = true"

    text = re.sub(r'(?m)^dataset\s*=\s*"([^"]*)"\s*$', absolute, text)
    path = out_dir / "pool.toml"
    if (
        not path.is_file() or path.read_text(encoding="utf-8") != text
    ):  # the learner and its services both ask
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


def load_run_pool(config: LearnerConfig) -> Pool:
    """The pool the views are drawn from, checked against ``[workers]``."""
    pool = load_pool(pool_file(config))
    names = set(pool.names())
    if missing := [w for w in config.data.workers if w not in names]:
        raise ConfigError(f"data.workers: {missing} not in the pool file; it has {sorted(names)}")
    want = config.workers
    for w in view_workers(pool, config.data):
        if want.max_tokens is not None and w.max_tokens != want.max_tokens:
            raise ConfigError(
                f"workers.max_tokens = {want.max_tokens} but pool worker {w.name!r} has {w.max_tokens}"
            )
        if want.temperature is not None and w.temperature != want.temperature:
            raise ConfigError(
                f"workers.temperature = {want.temperature} but pool worker {w.name!r} has {w.temperature}"
            )
    return pool


@dataclass(frozen=True)
class Share:
    """One ``[[data.tasks]]`` entry's questions of a split, and its weight in the training draw."""

    index: int  # its place in data.tasks
    name: str
    weight: float
    problems: list[Problem]


def shares(config: LearnerConfig, split: str) -> list[Share]:
    """Each ``[[data.tasks]]`` entry's ``split`` ("train" or "test"), restricted to its ``domains``. Bad data is
    the registry's ``TaskError`` (a malformed record names its file and line), prefixed with the entry."""
    found = []
    for i, task in enumerate(config.data.tasks):
        if split != "train" and not task.held_out:
            continue
        source = _source(task, split, i)
        try:
            found.append(Share(i, task.name, task.weight, registry.load(source, split)))
        except TaskError as exc:
            raise type(exc)(f"data.tasks[{i}] ({task.name}): {exc}") from exc
    return found


def _source(task: TaskEntry, split: str, i: int) -> TaskEntry:
    """Where the entry's ``split`` is read: ``test_path`` for the held-out one when given. A shipped fixture is a
    format sample, never training data: an entry that reads a file needs ``path`` (or ``hub``)."""
    if split != "train" and task.test_path:
        return msgspec.structs.replace(task, path=task.test_path, hub=False)
    entry = registry.entry(task.name)
    if entry.fixture is not None and not (task.path or task.hub):
        raise ConfigError(
            f"data.tasks[{i}] ({task.name}): set path = a local copy of its {split} split (or hub = true); the "
            f"fixture shipped for tests is a format sample, not {split} data"
        )
    return task


def problems(config: LearnerConfig, split: str) -> list[Problem]:
    """Every entry's questions of ``split``, in entry order."""
    return [p for share in shares(config, split) for p in share.problems]


def held_out(config: LearnerConfig) -> list[Problem]:
    """A fixed, domain-balanced sample of the entries' test splits (``data.eval_questions``), the same every run.

    An entry whose held-out questions share one with its training questions is refused (a held-out reward on
    training questions measures memory): give it ``test_path``, or ``held_out = false``."""
    tests = shares(config, "test")
    train = {s.index: {p.id for p in s.problems} for s in shares(config, "train")} if tests else {}
    for share in tests:
        if shared := sorted({p.id for p in share.problems} & train[share.index]):
            raise ConfigError(
                f"data.tasks[{share.index}] ({share.name}): {len(shared)} held-out questions are training questions "
                f"too (e.g. {shared[0]}); set its test_path to a held-out file, or held_out = false"
            )
    pool = [p for share in tests for p in share.problems]
    if not pool:
        raise ConfigError("data.tasks: no entry gives held-out questions (every one has held_out = false)")
    domains = [d for share in tests for d in _order(share, config.data.tasks[share.index])]
    by_domain = {d: [p for p in pool if p.domain == d] for d in dict.fromkeys(domains)}
    rng = random.Random(f"eval:{config.data.seed}")
    each = max(1, config.data.eval_questions // len(by_domain))
    return [p for items in by_domain.values() for p in rng.sample(items, min(each, len(items)))]


def _order(share: Share, task: TaskEntry) -> list[str]:
    """The entry's domains in its ``domains`` order, else in order of first appearance (the sim family's: math,
    mcq, code) — the order the held-out sample is drawn in, so it stays the same from run to run."""
    present = dict.fromkeys(p.domain for p in share.problems)
    return [d for d in task.domains if d in present] if task.domains else list(present)


class EpisodeStream:
    def __init__(
        self, mix: Sequence[Share], pool: Pool, config: LearnerConfig, buffer: RecursionBuffer
    ) -> None:
        self._mix = [s for s in mix if s.problems]
        self._pool = pool
        self._config = config
        self._buffer = buffer

    def _cycle(self, rng: random.Random) -> Iterator[Problem]:
        """Questions forever: an entry drawn by weight, then that entry's next question (one entry: no draw)."""
        streams = [self._entry_cycle(share.problems, rng) for share in self._mix]
        if len(streams) == 1:
            yield from streams[0]
            return
        weights = [share.weight for share in self._mix]
        while True:
            yield next(rng.choices(streams, weights)[0])

    def _entry_cycle(self, questions: list[Problem], rng: random.Random) -> Iterator[Problem]:
        """One entry's questions forever, reshuffled each pass; with ``balance_domains`` one domain after another."""
        if not self._config.data.balance_domains:
            yield from _shuffled_forever(questions, rng)
            return
        domains = sorted({p.domain for p in questions})
        streams = [_shuffled_forever([p for p in questions if p.domain == d], rng) for d in domains]
        while True:
            for stream in streams:
                yield next(stream)

    def episodes(self) -> Iterator[Episode]:
        cfg = self._config
        rng = random.Random(f"stream:{cfg.grpo.seed}")
        workers = view_workers(self._pool, cfg.data)
        questions = self._cycle(rng)
        slots = cfg.recursion_slots

        def fresh(recurse: bool = False) -> Episode:
            view = sample_view(workers, rng, cfg.data)
            scale = cfg.recursion.first_round_scale if recurse else 1.0
            return first_round(next(questions), view, scale=scale, recurse=recurse)

        while True:
            for i in range(cfg.grpo.questions_per_step):
                yield fresh(recurse=i < slots)
            for _ in range(slots):
                yield self._buffer.pop() or fresh()

    def rows(self) -> Iterator[dict]:
        for ep in self.episodes():
            yield row(ep, self._pool, self._config.data)


def _shuffled_forever(items: Sequence[Problem], rng: random.Random) -> Iterator[Problem]:
    while True:
        order = list(items)
        rng.shuffle(order)
        yield from order


def training_dataset(stream: EpisodeStream):  # -> datasets.IterableDataset (imported lazily: torch-side deps)
    from datasets import IterableDataset

    return IterableDataset.from_generator(stream.rows)
