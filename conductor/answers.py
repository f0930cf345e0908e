"""Comparing stated final answers: the exact-match normal form, and whether a round's steps agree.

Below ``tasks/`` so the Conductor's prompt (conductor/prompt.py) can say whether a finished round's steps agree
(docs/method.md §5), by the same normal form the verifier's exact-match fast path uses (tasks/answers.py re-exports
it). Pure and linear-time: answers are written by models and may be adversarial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def normalize_text(text: str) -> str:
    """For the exact-match fast path: spacing, sizing commands, wrappers and trailing punctuation do not matter."""
    t = text.strip().strip("$").strip()
    t = re.sub(r"\\(?:left|right|displaystyle|!|,|;|:|quad|qquad)", "", t)
    t = re.sub(r"\\(?:text|textbf|mathrm|mathbf|mbox)\s*\{([^{}]*)\}", r"\1", t)
    t = re.sub(r"\\[dt]frac", r"\\frac", t)
    t = re.sub(r"\s+", "", t).rstrip(".").lower()
    return t


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def same_answer(a: str | None, b: str | None) -> bool:
    """Two stated answers are the same when their exact-match normal forms are, or they are equal numbers."""
    if a is None or b is None:
        return False
    na, nb = normalize_text(a), normalize_text(b)
    if na == nb:
        return True
    if _NUMBER.fullmatch(na.replace(",", "")) and _NUMBER.fullmatch(nb.replace(",", "")):
        return float(na.replace(",", "")) == float(nb.replace(",", ""))
    return False


def agreement(answers: Sequence[str | None]) -> str:
    """``agree`` (every step stated the same answer), ``differ`` (two stated different ones) or ``missing`` (some
    step stated none, the rest agree)."""
    stated = [a for a in answers if a is not None]
    if any(not same_answer(stated[0], a) for a in stated[1:]):
        return "differ"
    return "agree" if stated and len(stated) == len(answers) else "missing"
