"""The cold start (issue 12 item 3): SFT on synthetic completions, then rejection sampling, before GRPO.

Stage 1, ``sft`` (``[cold_start.synthetic]``): TRL's ``SFTTrainer`` on (prompt, synthetic completion) pairs — the
real Conductor prompt for a training question and a random pool view, and a completion from
services/learner/synthetic.py (random routing). The loss is on the completion only. Teaches the format; routing stays
at chance.

Stage 2, ``rejection`` (``[cold_start.rejection]``): sample ``samples`` completions per training question from the
policy so far, score them through the rollout API (the executor runs and verifies them), keep the good ones, and SFT
on those: the policy's own successful text, so it also moves routing toward what worked. Kept are either the samples
that scored 1 (``select = "correct"``), or — expert iteration (issue 18) — each question's best sample by its mean
reward over ``draws`` fresh draws minus a cost term (``"best"``), for ``rounds`` rounds, each sampling from the last.

Each stage writes a full model directory (a LoRA adapter is merged), so the next stage starts from a plain path.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor.pool import Pool
from services.learner import synthetic
from services.learner.config import ConfigError, LearnerConfig, SyntheticSection
from services.learner.episodes import Episode, first_round, messages, next_round, sample_view, view_workers
from services.learner.rewards import ConductorReward
from tasks.problem import Problem

CORRECT = 1.0


def synthetic_rows(
    problems: Sequence[Problem], pool: Pool, config: LearnerConfig, n: int, *, seed: int = 0
) -> list[dict[str, Any]]:
    """``n`` prompt/completion rows; with recursion training on, a share of second-round prompts as well."""
    rng = random.Random(f"sft:{seed}")
    # Rows made outside the stage (a bench, a test) for a config without the table use the table's defaults.
    topologies = (config.cold_start.synthetic or SyntheticSection()).topologies
    workers = view_workers(pool, config.data)
    second_share = 0.25 if config.recursion.fraction > 0 else 0.0
    rows = []
    for _ in range(n):
        problem = rng.choice(list(problems))
        ep = first_round(problem, sample_view(workers, rng, config.data))
        k = len(ep.pool)
        text = synthetic.first_round(rng, k, ep.domain, config.data.max_steps, topologies)
        if rng.random() < second_share:
            answer = _some_answer(rng, problem)
            ep = next_round(ep, text, synthetic.sim_response(rng, answer, ep.domain))
            text = synthetic.second_round(rng, k, ep.domain)
        rows.append(_row(ep, text, pool, config))
    return rows


def _some_answer(rng: random.Random, problem: Problem) -> str:
    answer = getattr(problem.reference, "answer", "") or "42"
    return answer if rng.random() < 0.5 else "0"


def _row(ep: Episode, completion: str, pool: Pool, config: LearnerConfig) -> dict[str, Any]:
    return {
        "prompt": messages(ep, pool, config.data),
        "completion": [{"role": "assistant", "content": completion}],
    }


def sft(
    config: LearnerConfig,
    model_path: Path,
    rows: list[dict[str, Any]],
    out: Path,
    *,
    epochs: float,
    callbacks: Sequence[Any] = (),
) -> Path:
    """Fine-tune ``model_path`` on ``rows`` (completion-only loss); the result as a full model at ``out``."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from services.learner.policy import load, lora_config

    c = config.cold_start
    work = out.with_name(out.name + ".work")
    resume = _resumable(work, rows)
    model, tokenizer = load(model_path)
    args = SFTConfig(
        output_dir=str(work),
        num_train_epochs=epochs,
        per_device_train_batch_size=c.batch_size,
        gradient_accumulation_steps=c.accumulation,
        learning_rate=c.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        logging_steps=5,
        save_strategy="steps",  # a stopped run resumes its SFT from the newest checkpoint (_resumable)
        save_steps=c.save_steps,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        completion_only_loss=True,
        max_length=None,
        gradient_checkpointing=config.grpo.gradient_checkpointing,  # TRL's SFT default is on: 30% more compute
        bf16=config.generation.bf16,
        use_cpu=not torch.cuda.is_available(),
        seed=config.model.seed,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=list(callbacks),
    )
    trainer.train(resume_from_checkpoint=resume)
    save_merged(trainer.model, tokenizer, out)
    shutil.rmtree(work, ignore_errors=True)  # the checkpoints served their purpose; the model is ``out``
    return out


def _resumable(work: Path, rows: list[dict[str, Any]]) -> str | None:
    """The newest checkpoint in ``work`` when it was made on these very rows (their digest is kept beside it);
    otherwise ``work`` is cleared and SFT starts afresh."""
    from services.learner.grpo import last_checkpoint

    digest = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()
    mark = work / "rows.sha256"
    if mark.is_file() and mark.read_text().strip() == digest:
        return last_checkpoint(work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    mark.write_text(digest + "\n")
    return None


def save_merged(model: Any, tokenizer: Any, out: Path) -> None:
    """A plain model directory: a peft model's adapter is merged into its weights first."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def rejection_rows(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: Pool,
    config: LearnerConfig,
    reward: ConductorReward,
    *,
    logits_processor: Any = None,
    round_: int = 1,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Sample ``samples`` completions per question, score each on ``draws`` fresh draws over the rollout path, and
    keep the good ones (``select``), all of config ``[cold_start.rejection]``; the rows and the stage's figures.
    ``round_`` draws another set of questions and views in each round of expert iteration."""
    from services.learner.evaluate import fixed_episodes, generate
    from services.learner.search import Tally
    from services.learner.telemetry import routing, specialists

    c = config.cold_start.rejection
    if c is None:
        raise ConfigError("rejection sampling needs a [cold_start.rejection] table")
    rng = random.Random(f"rejection:{config.data.seed}:{round_}")
    chosen = rng.sample(list(problems), min(c.questions, len(problems)))
    episodes = fixed_episodes(chosen, pool, config, "rejection" if round_ == 1 else f"rejection{round_}")
    eps, texts = generate(
        model,
        tokenizer,
        episodes,
        pool,
        config,
        samples=c.samples,
        temperature=c.temperature,
        logits_processor=logits_processor,
    )
    k = c.draws
    scored = reward.score([e for e in eps for _ in range(k)], [t for t in texts for _ in range(k)])
    tallies = [Tally() for _ in texts]
    for i, s in enumerate(scored):
        if s.result.reward is not None:  # masked draws (a worker or verifier failed) are left out, not zeroed
            tallies[i // k].add(s.result.reward, s.result.usage.cost_usd)
    if c.select == "correct":
        kept = [j for j, t in enumerate(tallies) if t.n and t.mean == CORRECT]
    else:
        kept = _best_per_question(tallies, c.samples, c.cost_weight, c.min_reward)
    first_draws = [scored[j * k] for j in kept]
    stats = {
        "questions": len(episodes),
        "sampled": len(texts),
        "draws": len(scored),
        "parsed": sum(s.result.parsed for s in scored) / max(1, len(scored)),
        "correct": sum(s.result.reward == CORRECT for s in scored) / max(1, len(scored)),
        "kept": len(kept),
        "kept_mean_reward": round(sum(tallies[j].mean for j in kept) / len(kept), 4) if kept else None,
        **routing(first_draws, specialists(pool)),
    }
    return [_row(eps[j], texts[j], pool, config) for j in kept], stats


def _best_per_question(
    tallies: Sequence[Any], samples: int, cost_weight: float, min_reward: float
) -> list[int]:
    """Expert iteration's pick: per question (``samples`` consecutive tallies), the sample with the best mean reward
    minus ``cost_weight`` x mean $ (the cheaper on a tie), kept when its mean reward reaches ``min_reward``."""
    kept = []
    for q in range(0, len(tallies), samples):
        scored = [j for j in range(q, q + samples) if tallies[j].n]
        if not scored:
            continue
        best = max(
            scored,
            key=lambda j: (tallies[j].mean - cost_weight * tallies[j].mean_cost, -tallies[j].mean_cost, -j),
        )
        if tallies[best].mean >= min_reward:
            kept.append(best)
    return kept
