"""GRPO with TRL through its public seams: ``GRPOConfig`` values from the run config, ``GRPOTrainer`` with one
reward function (services/learner/rewards.py), an ``IterableDataset`` of episodes, callbacks for metrics and
progress, and ``resume_from_checkpoint`` — nothing subclassed.

What TRL's GRPO does with our values, and what we keep from the paper (docs/method.md §4): G completions per
question sampled at temperature 1.0; advantages = reward minus the group mean, divided by the std over the whole
step (``scale_rewards = "batch"``, which recursion training needs, services/learner/recursion.py); a clipped
(epsilon 0.2) token-level surrogate with DAPO's normalisation by the step's active tokens; no KL (beta 0), hence no
reference model; AdamW (0.9, 0.999) with a cosine schedule and 3% warm-up. One generation per optimizer step
(``steps_per_generation`` = gradient accumulation), so the policy that sampled is the policy being updated.

Generation: transformers ``generate`` on CPU by default; ``[generation] use_vllm`` hands it to TRL's vLLM
integration (``colocate``: inside this process on its GPUs; ``server``: a separate ``trl vllm-serve``), see
docs/learner.md for the GPU layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.learner.config import LearnerConfig


def grpo_args(config: LearnerConfig, out: Path) -> Any:
    """TRL's ``GRPOConfig`` for this run (every value traceable to a key of the run config)."""
    import torch
    from trl import GRPOConfig

    g, gen = config.grpo, config.generation
    batch = config.step_batch
    micro = g.micro_batch or batch
    vllm: dict[str, Any] = {}
    if gen.use_vllm:
        vllm = {
            "use_vllm": True,
            "vllm_mode": gen.vllm_mode,
            "vllm_gpu_memory_utilization": gen.vllm_gpu_memory_utilization,
            "vllm_tensor_parallel_size": gen.vllm_tensor_parallel_size,
        }
        if gen.vllm_server_base_url:
            vllm["vllm_server_base_url"] = gen.vllm_server_base_url
    return GRPOConfig(
        output_dir=str(out),
        max_steps=g.steps,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch // micro,
        num_generations=g.generations,
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler,
        warmup_steps=g.warmup_ratio,  # a float < 1 is a ratio of the total steps (transformers >= 5)
        adam_beta1=g.adam_beta1,
        adam_beta2=g.adam_beta2,
        weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm,
        epsilon=g.epsilon,
        beta=g.beta,
        temperature=g.temperature,
        max_completion_length=g.max_completion_tokens,
        scale_rewards=g.scale_rewards,
        loss_type=g.loss_type,
        shuffle_dataset=False,  # the episode stream shuffles, and second rounds must not be pulled ahead
        remove_unused_columns=False,
        dataloader_num_workers=0,
        logging_steps=g.logging_steps,
        save_strategy="steps",
        save_steps=g.save_steps,
        save_total_limit=3,
        report_to="none",
        disable_tqdm=True,
        gradient_checkpointing=g.gradient_checkpointing,
        bf16=gen.bf16,
        use_cpu=not torch.cuda.is_available(),
        seed=g.seed,
        model_init_kwargs={"dtype": "float32"},
        **vllm,
    )


def trainer(
    config: LearnerConfig,
    model_path: Path,
    dataset: Any,
    reward: Any,
    out: Path,
    callbacks: Sequence[Any] = (),
) -> Any:
    from trl import GRPOTrainer

    from services.learner.policy import load_tokenizer, lora_config

    tokenizer = load_tokenizer(model_path)
    return GRPOTrainer(
        model=str(model_path),  # a path, so TRL can also load a reference model when beta > 0
        reward_funcs=[reward],
        args=grpo_args(config, out),
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(callbacks),
        peft_config=lora_config(config),
    )


def last_checkpoint(out: Path) -> str | None:
    """The newest ``checkpoint-N`` directory under ``out`` (TRL/transformers' layout), for ``--resume``."""
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(out)) if out.is_dir() else None
