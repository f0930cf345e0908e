"""Constrained decoding of the workflow's lists, an option for sampling with transformers (``cold_start.grammar``).

A ``transformers.LogitsProcessor``: while the model is inside ``model_id = [ ... ]`` only tokens made of digits,
commas, spaces and the closing bracket are allowed; inside ``access_list = [ ... ]`` only tokens made of the
characters of ``[]``, ``["all"]``, commas and spaces. Everything else — the reasoning and the subtask strings — is
free. It removes the commonest small-model format failures (prose or stray symbols inside the integer lists) at a
cost of one short decode per row per step.

What it does not do, and why: it does not force the three lists to have equal length or the ids to lie inside the
pool (that needs the prompt's pool size and a count across lists: a full grammar engine), and TRL's transformers
generation takes no logits processor through its public config (``generation_kwargs`` become a
``GenerationConfig``), so GRPO samples unconstrained on CPU. On GPU, TRL's vLLM path has the public seam:
``GRPOConfig.vllm_structured_outputs_regex`` (see docs/learner.md). Here it serves the parse probes, rejection
sampling and evaluation (``policy.sample``).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

IDS_CHARS = frozenset("0123456789, ]")
ACCESS_CHARS = frozenset('[]"al, ')
_OPEN = re.compile(r"(model_id|access_list)\s*=\s*\[")


def open_list(text: str) -> str | None:
    """Which constrained list the text ends inside (``"model_id"``/``"access_list"``), or None."""
    last = None
    for m in _OPEN.finditer(text):
        last = m
    if last is None:
        return None
    depth = 1
    for ch in text[last.end() :]:
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return None
    return last.group(1)


class ListsGrammar:
    """``ListsGrammar(tokenizer, prompt_len)``: the processor for one ``generate`` call."""

    _allowed_cache: ClassVar[
        dict[int, dict[str, list[int]]]
    ] = {}  # per tokenizer: one pass over its vocabulary

    def __init__(self, tokenizer: Any, prompt_len: int) -> None:
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        key = id(tokenizer)
        if key not in self._allowed_cache:
            self._allowed_cache[key] = _allowed_tokens(tokenizer)
        self.allowed = self._allowed_cache[key]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        for row in range(input_ids.shape[0]):
            text = self.tokenizer.decode(input_ids[row, self.prompt_len :], skip_special_tokens=True)
            inside = open_list(text)
            if inside is None:
                continue
            mask = torch.full_like(scores[row], float("-inf"))
            mask[self.allowed[inside]] = 0.0
            scores[row] = scores[row] + mask
        return scores


def _allowed_tokens(tokenizer: Any) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {"model_id": [], "access_list": []}
    for token_id in range(len(tokenizer)):
        piece = tokenizer.decode([token_id])
        if not piece:
            continue
        if set(piece) <= IDS_CHARS:
            ids["model_id"].append(token_id)
        if set(piece) <= ACCESS_CHARS:
            ids["access_list"].append(token_id)
    return ids
