r"""The answer helpers both a task loader and the verifier need: boxed answers and the exact-match normal form.

A loader checks its reference with them (MATH-500's ``answer`` must be its solution's last ``\boxed{}``); the
verifier extracts and compares final answers with the same functions (services/verifier/extract.py, math_equiv.py),
so a reference and a response are read by one rule. Pure and linear-time: responses are written by the policy under
training and may be adversarial.
"""

from __future__ import annotations

import json
import re

from conductor.answers import agreement, normalize_text, same_answer

__all__ = [
    "agreement",
    "balanced",
    "boxed_all",
    "boxed_spans",
    "json_answer",
    "normalize_text",
    "same_answer",
]

LITERAL_DOMAIN = "literal"
"""The domain of answers that are Python literals (CRUXEval): the verifier compares evaluated literals
(tasks/literal.py); workers are asked for the ``general`` family's answer tags."""

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


JSON_TRIES = 4  # objects tried, each parse linear: a response of many braces costs at most four scans
_JSON_QUOTED = re.compile(r'"answer"[ \t]{0,8}:\s{0,8}"((?:[^"\\\n]|\\.){0,2000})"')
_JSON_BARE = re.compile(r'"answer"[ \t]{0,8}:[ \t]{0,8}([^\s"{][^\n]{0,200})')
_JSON_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\\\"/])")


def _unescape(raw: str) -> str:
    r"""A JSON string's source text, decoded for ``\\``, ``\"``, ``\/`` and ``\uXXXX`` only: models write LaTeX
    unescaped (``"\frac12"``), and JSON would read ``\f``, ``\b``, ``\t``, ``\n``, ``\r`` as control characters."""

    def one(m: re.Match[str]) -> str:
        body = m.group(1)
        return chr(int(body[1:], 16)) if body.startswith("u") else body

    return _JSON_ESCAPE.sub(one, raw)


def json_answer(region: str) -> str | None:
    r"""The ``answer`` field of ZeroEval's JSON answer format, as text; None when the response has none.

    A quoted value is read from its source text (``_unescape``); an unquoted one (a number, a list) from the first
    JSON object that parses, or as written up to the end of its line.
    """
    quoted = _JSON_QUOTED.search(region)
    if quoted is not None:
        return _unescape(quoted.group(1)).strip()
    decoder = json.JSONDecoder()
    pos = 0
    for _ in range(JSON_TRIES):
        start = region.find("{", pos)
        if start < 0:
            break
        pos = start + 1
        try:
            value, _end = decoder.raw_decode(region, start)
        except ValueError:  # json.JSONDecodeError, or a number too long to convert
            continue
        if isinstance(value, dict) and "answer" in value and value["answer"] is not None:
            return json.dumps(value["answer"], ensure_ascii=False)
    bare = _JSON_BARE.search(region)
    return bare.group(1).strip().rstrip(",}").strip() or None if bare else None
