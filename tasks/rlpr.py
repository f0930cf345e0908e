"""RLPR's published record format (``openbmb/RLPR-Train-Dataset``, verl-style rows): the paper's general-reasoning
source (docs/method.md §4), WebInstruct-derived free-form questions with a reference answer.

A row is ``data_source``, ``prompt`` (chat messages: RLPR's own system prompt, then the user question), ``ability``,
``reward_model`` ``{ground_truth, style}`` and ``extra_info`` ``{index, ...}``. Parquet and CSV copies store the
nested fields as JSON text; both shapes load. RLPR's system prompt (think/answer tags) is dropped: the benchmark
registry adds the answer-format instruction every benchmark gets (tasks/formats.py). Scoring is normalised
exact match, then math equivalence (docs/method.md §3: the paper does not say how RLPR was graded).
"""

from __future__ import annotations

import json
from pathlib import Path

from schemas.verify import TextReference
from tasks.errors import DatasetError
from tasks.problem import Problem
from tasks.rows import field, read_rows


def _nested(value: object, what: str) -> object:
    """A nested field as published (list/dict) or as the JSON text a CSV/Parquet export holds."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"RLPR {what} is neither a list/dict nor JSON text: {exc}") from exc
    return value


def _question(prompt: object) -> str:
    messages = _nested(prompt, "prompt")
    if isinstance(messages, list):
        users = [m.get("content", "") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if users and str(users[-1]).strip():
            return str(users[-1]).strip()
    raise DatasetError("RLPR prompt has no user message with text")


def _answer(reward_model: object) -> str:
    model = _nested(reward_model, "reward_model")
    answer = model.get("ground_truth") if isinstance(model, dict) else None
    if answer is None or not str(answer).strip():
        raise DatasetError("RLPR reward_model has no ground_truth")
    return str(answer).strip()


def load_rlpr(path: str | Path, benchmark: str = "rlpr") -> list[Problem]:
    problems = []
    for n, row in enumerate(read_rows(path)):
        try:
            question = _question(field(row, "prompt"))
            answer = _answer(field(row, "reward_model"))
        except DatasetError as exc:
            raise DatasetError(f"RLPR row {n}: {exc}") from exc
        extra = _nested(row.get("extra_info") or {}, "extra_info")
        index = extra.get("index", n) if isinstance(extra, dict) else n
        problems.append(
            Problem(
                id=f"{benchmark}/{index}",
                benchmark=benchmark,
                question=question,
                reference=TextReference(answer=answer, kind="auto"),
                domain="rlpr",
                subject=str(row.get("ability", "")),
            )
        )
    return problems
