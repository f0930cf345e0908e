"""Python-literal answers (CRUXEval's output prediction): equal when the evaluated literals are equal.

CRUXEval checks ``assert f(x) == <answer>``, so ``[1,2]`` and ``[1, 2]`` are the same answer and ``{1: None, 2:
None}`` equals the dict in any key order. Literals are read with ``ast.literal_eval`` (no code runs, so no sandbox);
an answer that is no literal is compared as text with a string gold, because a JSON ``"answer": "abc"`` often means
the string ``'abc'``. Nesting past ``MAX_DEPTH`` or a longer text is no answer (bounded work on adversarial text).
"""

from __future__ import annotations

import ast
import warnings

MAX_CHARS = 2000
MAX_DEPTH = 50


class _NoLiteral(Exception):
    pass


def evaluate(text: str) -> object:
    """The literal ``text`` spells; ``_NoLiteral`` when it spells none."""
    text = text.strip()
    if len(text) > MAX_CHARS or max_depth(text) > MAX_DEPTH:
        raise _NoLiteral(text[:40])
    try:
        with (
            warnings.catch_warnings()
        ):  # "invalid decimal literal" and the like: a wrong answer, not a log line
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _NoLiteral(text[:40]) from None


def max_depth(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def canonical(text: str) -> str:
    """One spelling per literal value (``repr`` of the evaluated value), the text itself when it is no literal."""
    try:
        return repr(evaluate(text))
    except _NoLiteral:
        return text.strip()


def grade(answer: str, gold: str) -> tuple[bool, str]:
    """(correct, reason) of an extracted answer against a gold literal."""
    try:
        expected = evaluate(gold)
    except _NoLiteral:
        return answer.strip() == gold.strip(), "gold is no literal: compared as text"
    try:
        value = evaluate(answer)
    except _NoLiteral:
        if isinstance(expected, str):
            ok = answer.strip() == expected
            return ok, "answer read as a string" + ("" if ok else f", expected {gold}")
        return False, f"answer {answer[:80]!r} is no Python literal"
    try:
        ok = bool(value == expected)
    except Exception as exc:  # a comparison that raises (e.g. huge ints) is a wrong answer, not a crash
        return False, f"literals not comparable: {type(exc).__name__}"
    return ok, "equal literals" if ok else f"literal {answer[:80]}, expected {gold[:80]}"
