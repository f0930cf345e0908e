"""A training run from a config: base model → parse probe → SFT → rejection sampling → held-out eval → GRPO →
held-out eval → report. `conductor train` and `conductor serve learner` both call ``run``.

A run lives in ``output.dir``: ``stages.json`` (each finished stage and its figures), ``metrics.jsonl`` (one line
per GRPO step), ``rollouts.jsonl`` (every rollout), model directories per stage (``base-model/``, ``sft/``,
``rejection/``, ``policy/``; with ``output.adapter_rank``, ``adapter/``: the policy as a LoRA adapter on the base,
measured as stage ``adapter``), GRPO checkpoints under ``grpo/`` and ``report.html``/``report.png``. Resuming skips
the finished stages and continues GRPO from its newest checkpoint; starting over in a used directory is refused.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from conductor.pool import Pool
from conductor.prompt import view_fingerprint, worker_fingerprint
from schemas.learner import PolicyCard
from services.learner import cascade, coldstart, evaluate, policy, search
from services.learner.config import LearnerConfig
from services.learner.episodes import Episode, view_workers
from services.learner.export import export_adapter, load_with_adapter
from services.learner.grpo import last_checkpoint, trainer
from services.learner.recursion import RecursionBuffer
from services.learner.rewards import ConductorReward, Scorer
from services.learner.stream import EpisodeStream, Share, held_out, load_run_pool, shares, training_dataset
from services.learner.telemetry import metrics_callback, rollout_log, specialists
from tasks.problem import Problem

Progress = Callable[[str, int, int, dict[str, Any]], None]
"""``(stage, step, total, figures)``: the CLI's progress bar and the learner service's progress events."""


MatrixSource = Callable[[Sequence[Problem], Pool, Sequence[str]], tuple["cascade.Matrix", int]]
"""(questions, pool, worker names) -> (answer matrix, questions left out): the cascade stage's single answers."""


class RunExistsError(RuntimeError):
    """The output directory holds an earlier run; resume it or choose another directory."""


class Stages:
    """``stages.json``: the finished stages in order, each with its figures."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.is_file() else {}

    def record(self, name: str, figures: dict[str, Any]) -> dict[str, Any]:
        self.done[name] = {**figures, "finished": time.time()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.done, indent=2, default=str))
        return self.done[name]


def run(
    config: LearnerConfig,
    score: Scorer,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    matrix: MatrixSource | None = None,
) -> dict:
    """Every stage the config asks for; the figures of each (also in ``stages.json``), on ``model.threads`` CPU
    threads when set (torch's own count is restored after). ``matrix``: how the cascade stage gets its answer
    matrix (default: through ``score``, the rollout API; conductor/app/replay_matrix.py computes it in-process)."""
    if not config.model.threads:
        return _run(config, score, resume=resume, progress=progress, matrix=matrix)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(config.model.threads)
    try:
        return _run(config, score, resume=resume, progress=progress, matrix=matrix)
    finally:
        torch.set_num_threads(before)


def _run(
    config: LearnerConfig,
    score: Scorer,
    *,
    resume: bool,
    progress: Progress | None,
    matrix: MatrixSource | None = None,
) -> dict:
    out = Path(config.output.dir)
    stages = Stages(out / "stages.json")
    if stages.done and not resume:
        raise RunExistsError(
            f"{out} holds a run (stages {list(stages.done)}); pass --resume or another output.dir"
        )
    r = _Run.open(config, score, out, stages, progress)
    model_path = r.measured("base", policy.prepare_base(config, r.train))
    model_path = r.cold_start(model_path, matrix)
    r.measured("before_grpo", model_path, rewards=True)
    if config.grpo.steps and "grpo" not in stages.done:
        grpo_stage(config, model_path, r.mix, r.pool, r.reward, r.out, resume=resume, note=r.note)
        stages.record("grpo", {"policy": str(r.out / "policy")})
    if "grpo" in stages.done:
        r.measured("after_grpo", r.out / "policy", rewards=True)
    final = None  # the policy to export: GRPO's, or the last supervised stage's in a run without GRPO
    if "grpo" in stages.done:
        final = r.out / "policy"
    elif not config.grpo.steps:
        final = model_path
    if final is not None and config.output.adapter_rank and "adapter" not in stages.done:
        r.export(final)
    _report(r.out)
    return stages.done


@dataclass
class _Run:
    """What every stage of one run reads: its directory and stages, the training mix and pool, the fixed probe and
    held-out episodes each stage is measured on, the reward and the decoding grammar."""

    config: LearnerConfig
    out: Path
    stages: Stages
    note: Progress
    mix: list[Share]
    pool: Pool
    train: list[Problem]
    probe: list[Episode]
    eval_eps: list[Episode]
    reward: ConductorReward
    grammar: Any

    @classmethod
    def open(
        cls, config: LearnerConfig, score: Scorer, out: Path, stages: Stages, progress: Progress | None
    ) -> _Run:
        mix, pool = shares(config, "train"), load_run_pool(config)
        return cls(
            config=config,
            out=out,
            stages=stages,
            note=progress or (lambda *_: None),
            mix=mix,
            pool=pool,
            train=[p for share in mix for p in share.problems],
            probe=evaluate.fixed_episodes(
                held_out(config)[: config.cold_start.parse_probe], pool, config, "probe"
            ),
            eval_eps=evaluate.fixed_episodes(held_out(config), pool, config, "eval"),
            reward=ConductorReward(score, config),
            grammar=_grammar(config),
        )

    def measured(
        self, name: str, path: Path, extra: dict[str, Any] | None = None, *, rewards: bool = False
    ) -> Path:
        """``path``'s parse rate (and held-out reward) recorded as stage ``name``, unless it was already."""
        if name not in self.stages.done:
            model, tok = policy.load(path)
            figures = {
                "parse_rate": evaluate.parse_rate(
                    model, tok, self.probe, self.pool, self.config, self.grammar
                ),
                **(extra or {}),
            }
            if rewards:
                figures["held_out"] = evaluate.held_out_reward(
                    model, tok, self.eval_eps, self.pool, self.config, self.reward
                )
            self.note(name, 1, 1, self.stages.record(name, figures))
        return path

    def cold_start(self, model_path: Path, matrix: MatrixSource | None) -> Path:
        """The supervised stages the config asks for, in order, each from the previous one's model."""
        config, c, out = self.config, self.config.cold_start, self.out
        if c.cascade is not None:
            rows = partial(
                _cascade_rows, config, self.train, self.pool, self.reward, out / "cascade_rows.json", matrix
            )
            model_path = self._supervised("cascade", model_path, rows, c.cascade.epochs)
        if c.search is not None:
            rows = partial(_search_rows, config, self.train, self.pool, self.reward, out / "search_rows.json")
            model_path = self._supervised("search", model_path, rows, c.search.epochs)
        if c.synthetic is not None:  # the stage keeps the name "sft": earlier runs resume
            model_path = self._supervised("sft", model_path, self._synthetic_rows, c.synthetic.epochs)
        if c.rejection is not None:
            for r in range(1, c.rejection.rounds + 1):
                model_path = self._rejection(r, model_path)
        return model_path

    def _synthetic_rows(self) -> tuple[list[dict[str, Any]], None]:
        """The sft stage's rows: written from the pool's cards, no figures of their own."""
        examples = self.config.cold_start.synthetic.examples
        return coldstart.synthetic_rows(
            self.train, self.pool, self.config, examples, seed=self.config.model.seed
        ), None

    def _supervised(
        self,
        name: str,
        model_path: Path,
        rows: Callable[[], tuple[list[dict[str, Any]], dict[str, Any] | None]],
        epochs: int,
    ) -> Path:
        """SFT on the rows ``rows`` makes (and the figures it measured), then measured; its model is the next's."""
        if name not in self.stages.done:
            self.note(name, 0, 1, {})
            made, figures = rows()
            coldstart.sft(
                self.config,
                model_path,
                made,
                self.out / name,
                epochs=epochs,
                callbacks=[_progress(name, self.note)],
            )
            self.measured(name, self.out / name, figures)
        return self.out / name

    def _rejection(self, r: int, model_path: Path) -> Path:
        """Rejection-sampling round ``r``: SFT on the policy's own rewarded samples; a round that kept no sample
        leaves the model as it was."""
        c, name = self.config.cold_start.rejection, "rejection" if r == 1 else f"rejection_{r}"
        if name not in self.stages.done:
            self.note(name, 0, 1, {})
            model, tok = policy.load(model_path)
            rows, figures = coldstart.rejection_rows(
                model,
                tok,
                self.train,
                self.pool,
                self.config,
                self.reward,
                logits_processor=self.grammar,
                round_=r,
            )
            del model
            if rows:
                coldstart.sft(
                    self.config,
                    model_path,
                    rows,
                    self.out / name,
                    epochs=c.epochs,
                    callbacks=[_progress(name, self.note)],
                )
            self.measured(name, self.out / name if rows else model_path, figures, rewards=True)
        return self.out / name if (self.out / name).is_dir() else model_path

    def export(self, final: Path) -> None:
        """``final`` as a LoRA adapter on the base, measured as stage ``adapter``."""
        config = self.config
        self.note("adapter", 0, 1, {})
        base = Path(config.output.adapter_base) if config.output.adapter_base else config.model_dir()
        figures = export_adapter(
            base,
            final,
            self.out / "adapter",
            rank=config.output.adapter_rank,
            card=policy_card(config, self.pool),
        )
        model = load_with_adapter(base, self.out / "adapter")
        tok = policy.load_tokenizer(final)
        figures["parse_rate"] = evaluate.parse_rate(model, tok, self.probe, self.pool, config, self.grammar)
        figures["held_out"] = evaluate.held_out_reward(
            model, tok, self.eval_eps, self.pool, config, self.reward
        )
        self.note("adapter", 1, 1, self.stages.record("adapter", figures))


def policy_card(config: LearnerConfig, pool: Pool) -> PolicyCard:
    """How this run's policy was trained, so it is served the same way (the base fingerprint is the export's). A run
    whose every prompt showed the same view (all its workers, in pool order) records that view: the policy is a
    pointer into that numbering and is served on it only. A run on varied views records the workers they were drawn
    from: it is served on views of those workers."""
    d, g = config.data, config.grpo
    workers = view_workers(pool, d)
    fixed = not d.shuffle_view and d.k_min >= len(workers)
    view = view_fingerprint(pool.cards(workers)) if fixed else ""
    # Trained on views drawn from ``workers``: the card names them, and a planner serves it on views of them only.
    seen = [] if fixed else sorted({worker_fingerprint(w) for w in pool.cards(workers)})
    return PolicyCard(
        prompt=d.prompt_style,
        show_domain=d.show_domain,
        max_steps=d.max_steps,  # type: ignore[arg-type]
        rounds=d.rounds,
        response_chars=d.response_chars,
        temperature=config.serve_temperature,
        max_tokens=g.max_completion_tokens,
        trained_by=config.name,
        view=view,
        workers=seen,
        questions="harness",  # tasks/registry.py ``load``: every entry's questions carry their format instruction
    )


def _search_rows(config, train, pool, reward, path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The search stage's SFT rows and figures, kept in ``path`` so a run stopped during its SFT does not search
    again (services/learner/search.py)."""
    if path.is_file():
        saved = json.loads(path.read_text())
        return saved["rows"], saved["figures"]
    c = config.cold_start.search
    started = time.perf_counter()
    found = search.search(train, pool, config, reward, seed=config.model.seed)
    picks = search.choose(
        found,
        prior=c.prior,
        cost_weight=c.cost_weight,
        tolerance=c.tolerance,
        by=c.choice,
        cost_form=c.cost_form,
    )
    rows = search.rows(picks, pool, config)
    figures = {
        **search.figures(picks, specialists(pool)),
        "search_s": round(time.perf_counter() - started, 1),
        "rollouts": sum(t.n for f in found for t in f.tallies),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "figures": figures}))
    return rows, figures


def _cascade_rows(
    config, train, pool, reward, path: Path, source: MatrixSource | None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cascade stage's SFT rows and figures (services/learner/cascade.py), kept in ``path`` like the search's."""
    if path.is_file():
        saved = json.loads(path.read_text())
        return saved["rows"], saved["figures"]
    c = config.cold_start.cascade
    started = time.perf_counter()
    workers = [w.name for w in view_workers(pool, config.data)]
    questions = (
        train
        if not c.questions
        else random.Random(config.model.seed).sample(train, min(c.questions, len(train)))
    )
    matrix_path = path.with_name("answer_matrix.json")
    if matrix_path.is_file():  # a run stopped after scoring: the rollouts are not paid for twice
        saved = json.loads(matrix_path.read_text())
        matrix, masked = cascade.load_matrix(saved["cells"], questions), saved["masked"]
    else:
        if source is not None:
            matrix, masked = source(questions, pool, workers)
        else:
            matrix, masked = cascade.answer_matrix(questions, pool, workers, reward)
        matrix_path.parent.mkdir(parents=True, exist_ok=True)
        matrix_path.write_text(json.dumps({"cells": cascade.dump_matrix(matrix), "masked": masked}))
    views = config.data.views or [workers]

    def per_view(value: float | list[float]) -> list[float]:  # one value for every view, or one each
        return value if isinstance(value, list) else [value] * len(views)

    choices = [
        cascade.choose(
            matrix,
            questions,
            view,
            budget=b,
            cheap=c.cheap,
            select=c.select,
            slack=sl,
            escalate=c.escalate,
            rounds=c.rounds,
        )
        for view, b, sl in zip(views, per_view(c.budget), per_view(c.slack), strict=True)
    ]
    rows = cascade.rows(
        choices,
        questions,
        matrix,
        pool,
        config,
        limit=c.rows,
        seed=config.model.seed,
        first_weight=c.first_weight,
    )
    figures = {
        "views": [{"view": list(ch.view), **ch.figures} for ch in choices],
        "questions": len(matrix),
        "masked_questions": masked,
        "rows": len(rows),
        "rollouts": len(questions) * len(workers),
        "cascade_s": round(time.perf_counter() - started, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "figures": figures}))
    return rows, figures


def grpo_stage(
    config, model_path, mix: list[Share], pool, reward, out: Path, *, resume: bool, note: Progress
) -> None:
    """GRPO from ``model_path``: checkpoints under ``out/grpo``, the final policy in ``out/policy``."""
    buffer = RecursionBuffer(seed=config.grpo.seed)
    stream = EpisodeStream(mix, pool, config, buffer)
    metrics = metrics_callback(out / "metrics.jsonl")
    reward.add_observer(metrics.observe)
    reward.add_observer(buffer.observe)
    reward.add_observer(rollout_log(out / "rollouts.jsonl"))
    t = trainer(
        config, model_path, training_dataset(stream), reward, out / "grpo", [metrics, _progress("grpo", note)]
    )
    t.train(resume_from_checkpoint=last_checkpoint(out / "grpo") if resume else None)
    coldstart.save_merged(t.model, t.processing_class, out / "policy")


def _progress(stage: str, note: Progress):
    """A TrainerCallback forwarding each logged step (of SFT or GRPO) to the progress sink."""
    from transformers import TrainerCallback

    class Forward(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            figures = {k: v for k, v in (logs or {}).items() if k in ("reward", "loss", "learning_rate")}
            note(stage, state.global_step, state.max_steps, figures)

    return Forward()


def _grammar(config: LearnerConfig):
    if not config.cold_start.grammar:
        return None
    from services.learner.grammar import ListsGrammar

    return ListsGrammar


def _report(out: Path) -> None:
    from services.learner.report import write_report

    write_report(out)
