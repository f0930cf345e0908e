"""The training stream: each GRPO step's prompts, as an endless ``datasets.IterableDataset`` TRL samples from.

A step is ``questions_per_step`` first-round questions, each with its own random pool view, then
``recursion_slots`` second rounds taken from the recursion buffer (services/learner/recursion.py); while the buffer
is empty (the first steps) those slots hold plain first rounds, so every step has the same number of prompts —
TRL's batch shape is fixed. Questions cycle through the training split, reshuffled each pass, seeded.

A stream rather than a fixed dataset because second rounds only exist once their first rounds are scored. TRL's own
shuffle is turned off (``shuffle_dataset = False``): its buffered shuffle would pull rows ahead of time.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from conductor.pool import Pool, load_pool
from evaluation import sim
from evaluation.datasets import Problem
from services.learner.config import ConfigError, LearnerConfig
from services.learner.episodes import Episode, first_round, row, sample_view, view_workers
from services.learner.recursion import RecursionBuffer


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
    if not path.is_file() or path.read_text(encoding="utf-8") != text:  # the learner and its services both ask
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
            raise ConfigError(f"workers.max_tokens = {want.max_tokens} but pool worker {w.name!r} has {w.max_tokens}")
        if want.temperature is not None and w.temperature != want.temperature:
            raise ConfigError(
                f"workers.temperature = {want.temperature} but pool worker {w.name!r} has {w.temperature}"
            )
    return pool


def problems(config: LearnerConfig, split: str) -> list[Problem]:
    """The ``split`` of the data family, restricted to ``data.domains``."""
    found = [p for p in sim.tasks(split) if p.domain in config.data.domains]
    if not found:
        raise ConfigError(f"data.domains {config.data.domains}: no {split!r} questions in the {config.data.family} family")
    return found


def held_out(config: LearnerConfig) -> list[Problem]:
    """A fixed, domain-balanced sample of the held-out split (``data.eval_questions``), the same every run."""
    pool = problems(config, "test")
    by_domain = {d: [p for p in pool if p.domain == d] for d in config.data.domains}
    rng = random.Random(f"eval:{config.data.seed}")
    each = max(1, config.data.eval_questions // len(by_domain))
    return [p for items in by_domain.values() for p in rng.sample(items, min(each, len(items)))]


class EpisodeStream:
    def __init__(
        self, questions: Sequence[Problem], pool: Pool, config: LearnerConfig, buffer: RecursionBuffer
    ) -> None:
        self._questions = list(questions)
        self._pool = pool
        self._config = config
        self._buffer = buffer

    def _cycle(self, rng: random.Random) -> Iterator[Problem]:
        """Questions forever, reshuffled each pass; with ``balance_domains`` one domain after another."""
        if not self._config.data.balance_domains:
            yield from _shuffled_forever(self._questions, rng)
            return
        domains = sorted({p.domain for p in self._questions})
        streams = [_shuffled_forever([p for p in self._questions if p.domain == d], rng) for d in domains]
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
