"""Deliberately wrong variants of known-good solutions: the negative half of every verifier test and benchmark.

The mutant keeps the original function and wraps it so every result is perturbed in a type-preserving way (an int
off by one, a string with a character appended, a boolean flipped, a list with an extra element, a data frame or
array one row shorter, a tuple's first result perturbed). Unlike a random
source edit it can never produce an equivalent program, so "the mutant must fail" is always a valid expectation.
"""

from __future__ import annotations

PERTURB = """

def __perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.0
    if isinstance(value, str):
        return value + "~"
    if isinstance(value, list):
        return value + [value[0] if value else 0]
    if isinstance(value, tuple):  # a tuple of results (a frame and its plot): the first one perturbed
        return (__perturb(value[0]), *value[1:]) if value else (0,)
    if isinstance(value, dict):
        return {**value, "__mutant__": 0}
    if hasattr(value, "iloc") and hasattr(value, "shape"):  # pandas: one row fewer, or one more when empty
        return value.iloc[:-1] if len(value) else value.reindex(range(1))
    if hasattr(value, "dtype") and hasattr(value, "shape") and getattr(value, "ndim", 0) >= 1:  # numpy array
        return value[:-1] if len(value) else value
    if hasattr(value, "dtype") and hasattr(value, "shape"):  # a numpy scalar
        return value + 1
    return 0 if value is None else None
"""


def mutate_completion(completion: str, entry_point: str) -> str:
    """A HumanEval completion (function body continuing the prompt) whose function now returns wrong values."""
    return (
        completion.rstrip("\n")
        + "\n"
        + PERTURB
        + f"\n\n__original = {entry_point}\n\n\ndef {entry_point}(*args, **kwargs):\n"
        + "    return __perturb(__original(*args, **kwargs))\n"
    )
