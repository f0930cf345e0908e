"""A tiny causal LM built in code, for tests and quick runs: nothing is downloaded.

A small Llama (``LlamaConfig``: a couple of layers, hidden ~100) with a byte-level BPE tokenizer trained with the
``tokenizers`` library on the learner's own text — the Conductor prompt, training questions and synthetic
completions — so almost every word is one token and prompts stay short. Byte-level BPE rather than a word-level
vocabulary: every string round-trips exactly (digits, LaTeX, code), so a question never turns into unknown tokens
and a decoded completion is exactly what the model wrote. It is wrapped as a ``PreTrainedTokenizerFast`` with a
minimal chat template and saved beside the model, so the directory loads with ``from_pretrained`` like any model
(TRL takes a path).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

from conductor.prompt import RECURSION_RULES, render_examples, system_prompt
from services.learner import synthetic
from tasks.problem import Problem

SPECIAL = ["<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
STAMP = ".conductor-tiny"


def corpus(questions: Iterable[Problem], *, seed: int = 0, completions: int = 2000) -> list[str]:
    """Text the tokenizer learns its merges from: prompt wording, questions and synthetic completions."""
    rng = random.Random(seed)
    texts = [
        system_prompt(5),
        render_examples(),
        RECURSION_RULES,
        "Answer type: math mcq code\nModel 0: 1 2 3 4",
    ]
    domains = []
    for p in questions:
        texts.append(p.question)
        domains.append(p.domain)
    for _ in range(completions):
        domain = rng.choice(domains or ["math"])
        texts.append(synthetic.first_round(rng, rng.randint(1, 5), domain))
        texts.append(synthetic.second_round(rng, rng.randint(1, 5), domain))
    return texts


def build_tokenizer(texts: list[str], vocab_size: int = 2048):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|end|>", pad_token="<|pad|>", padding_side="left"
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build(
    out: Path, questions: Iterable[Problem], *, layers: int = 2, hidden: int = 96, seed: int = 0
) -> Path:
    """Write a fresh tiny model and its tokenizer to ``out`` (reused when already built with the stamp)."""
    if (out / STAMP).is_file():
        return out
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = build_tokenizer(corpus(questions, seed=seed))
    heads = max(1, hidden // 32)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / STAMP).write_text(f"layers={layers} hidden={hidden} seed={seed}\n", encoding="utf-8")
    return out
