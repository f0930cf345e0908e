r"""The answer helpers both a task loader and the verifier need: boxed answers and the exact-match normal form.

A loader checks its reference with them (MATH-500's ``answer`` must be its solution's last ``\boxed{}``); the
verifier extracts and compares final answers with the same functions (services/verifier/extract.py, math_equiv.py),
so a reference and a response are read by one rule. Pure and linear-time: responses are written by the policy under
training and may be adversarial.
"""

from __future__ import annotations

import re

from conductor.answers import agreement, normalize_text, same_answer

__all__ = ["agreement", "balanced", "boxed_all", "boxed_spans", "normalize_text", "same_answer"]

LITERAL_DOMAIN = "literal"
"""The domain of answers that are Python literals (CRUXEval): the verifier compares evaluated literals
(services/verifier/literal.py); workers are asked for the ``general`` family's answer tags."""

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)\s*\{")


def balanced(text: str, open_at: int) -> str | None:
    """Contents of the brace group whose ``{`` is at ``open_at``; None when it never closes."""
    depth = 0
    i = open_at
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
        i += 1
    return None


def boxed_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, contents)`` of every ``\\boxed{…}`` / ``\\fbox{…}`` in order (nested boxes count once)."""
    found: list[tuple[int, int, str]] = []
    pos = 0
    while True:
        m = _BOX_CMD.search(text, pos)
        if not m:
            return found
        inner = balanced(text, m.end() - 1)
        if inner is None:
            return found
        pos = m.end() - 1 + len(inner) + 2
        found.append((m.start(), pos, inner.strip()))


def boxed_all(text: str) -> list[str]:
    """Every ``\\boxed{…}`` / ``\\fbox{…}`` in order (nested boxes count once, the outer one)."""
    return [inner for _, _, inner in boxed_spans(text)]
