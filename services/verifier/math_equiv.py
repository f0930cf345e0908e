"""Math answer equivalence: normalised exact match, then math-verify, then the few rules a careful grader adds.

Runs inside a math worker process (see ``math_worker``) because math-verify bounds its own work with
``signal.alarm``, which only works in a process's main thread; the host still enforces an outer deadline by
killing the worker. Extra rules beyond math-verify, each gated so it cannot turn a wrong answer right:

* degrees <-> radians, only when the question is about angles and the answer carries an explicit unit (a degree
  mark or a pi);
* an interval written as an inequality (or the reverse), only when the question or gold is about intervals;
* a bare choice letter when the gold is a letter such as ``\\text{(C)}``;
* thousands separators (``1{,}000``, ``1\\,000``) and units around a number (``5 \\text{ cm}``, ``\\$3``),
  only when what is left is a plain number;
* numbers math-verify calls equal are re-checked exactly (``exactness``): two different exact values are never
  equal however close, and a written decimal only matches to the digits it writes;
* AIME: the answer must be an integer written as one (``033`` is 33; ``33.0`` or ``33/1`` is not an AIME answer).
"""

from __future__ import annotations

import functools
import re

import msgspec

from services.verifier import exactness
from services.verifier.mcq import letter_of
from tasks.answers import normalize_text

ANGLE_WORDS = re.compile(r"angle|degree|radian|\\circ|°|\\angle|triangle|rotat|arc\b|\bsin|\bcos|\btan", re.I)
INTERVAL_WORDS = re.compile(r"interval|inequalit|domain|range|solution set|values? of", re.I)
DEGREE_MARK = re.compile(
    r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°|\\degree|\s*\\text\{\s*degrees?\s*\}|\s+degrees?)\s*$"
)
INEQUALITY = re.compile(r"<|>|\\le|\\ge|\\leq|\\geq|≤|≥|\\lt|\\gt")
UNIT_TAIL = re.compile(
    r"^(?P<num>.*?)\s*(?:\\(?:text|mathrm|mbox|textrm)\s*\{[^{}]*\}|[A-Za-z]{2,}\.?)(?:\^\s*\{?\d\}?)?$"
)
CURRENCY = re.compile(r"^(?:\\\$|\$|\\text\{\s*\\?\$\s*\})\s*")
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
THOUSANDS = re.compile(r"^-?\d{1,3}(?:(?:\{,\}|\\,|\\!|,|\\ |\s)\d{3})+(?:\.\d+)?$")
INTEGER = re.compile(r"^\d+$")


class MathVerdict(msgspec.Struct, frozen=True, kw_only=True):
    correct: bool
    reason: str


def plain_number(text: str) -> str | None:
    """The number inside currency marks, thousands separators and a trailing unit, or None if it is not one."""
    if len(text) > 100:
        return None
    t = CURRENCY.sub("", text.strip().strip("$").strip())
    unit = UNIT_TAIL.match(t)
    if unit and unit.group("num").strip():
        t = unit.group("num").strip()
    t = CURRENCY.sub("", t).strip()
    if THOUSANDS.match(t):
        t = re.sub(r"\{,\}|\\,|\\!|,|\\ |\s", "", t)
    return t if NUMBER.match(t) else None


@functools.lru_cache(maxsize=4096)
def _parse(latex: str, timeout: int) -> tuple:
    from math_verify import parse

    wrapped = f"\\boxed{{{latex}}}" if _balanced(latex) else f"${latex}$"
    return tuple(parse(wrapped, parsing_timeout=timeout))


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if depth < 0:
            return False
    return depth == 0


def _verify(gold: str, pred: str, timeout: int, relations: bool = False) -> bool:
    from math_verify import verify

    g, p = _parse(gold, timeout), _parse(pred, timeout)
    if not g or not p:
        return False
    if not verify(list(g), list(p), timeout_seconds=timeout, allow_set_relation_comp=relations):
        return False
    return (
        exactness.withdrawn(g[0], p[0], gold, pred) is None
    )  # math-verify's float tolerance, re-checked exactly


def _angle_variants(gold: str, pred: str, question: str) -> list[tuple[str, str]]:
    if not ANGLE_WORDS.search(question + " " + gold):
        return []
    out = []
    degrees = DEGREE_MARK.search(pred)
    if degrees and "\\pi" in gold:
        value = pred[: degrees.start()].strip()
        out.append((f"\\frac{{({value})\\pi}}{{180}}", "degrees converted to radians"))
    if "\\pi" in pred and "\\pi" not in gold and re.search(r"degree|\\circ|°", question + gold, re.I):
        out.append((f"\\frac{{180({pred})}}{{\\pi}}", "radians converted to degrees"))
    return out


def equivalent(
    gold: str, pred: str, question: str = "", domain: str | None = None, timeout: int = 5
) -> MathVerdict:
    """Is ``pred`` (an extracted final answer) equivalent to ``gold``? Pure apart from math-verify's alarms."""
    if domain and domain.lower().startswith("aime") and INTEGER.match(gold.strip()):
        p = pred.strip().strip("$").strip()
        ok = bool(INTEGER.match(p)) and int(p) == int(gold)
        return MathVerdict(correct=ok, reason="integer match" if ok else "AIME answers are integers 0-999")
    if normalize_text(gold) == normalize_text(pred):
        return MathVerdict(correct=True, reason="exact match")
    gold_letters = letter_of(gold)
    if len(gold_letters) == 1 and re.search(r"\\text|\(|^[A-Ea-e]$", gold.strip()):
        ok = letter_of(pred) == gold_letters
        return MathVerdict(correct=ok, reason="choice letter" + ("" if ok else " differs"))
    if _verify(gold, pred, timeout):
        return MathVerdict(correct=True, reason="math-verify")
    g_num, p_num = plain_number(gold), plain_number(pred)
    if p_num is not None and p_num != pred.strip() and (g_num is not None) and _verify(g_num, p_num, timeout):
        return MathVerdict(correct=True, reason="number equal after removing separators/units")
    for variant, why in _angle_variants(gold, pred, question):
        if _verify(gold, variant, timeout):
            return MathVerdict(correct=True, reason=why)
    interval_context = INTERVAL_WORDS.search(question) or re.search(r"\\infty|\\cup|\[|\]", gold)
    if interval_context and (INEQUALITY.search(pred) or INEQUALITY.search(gold)):
        if _verify(gold, pred, timeout, relations=True):
            return MathVerdict(correct=True, reason="interval and inequality describe the same set")
    return MathVerdict(correct=False, reason="not equivalent")


def grade(answers: list[str], gold: str, question: str, domain: str | None, timeout: int) -> MathVerdict:
    """Grade the last final answer; if the answer region gave several non-equivalent final answers, it is wrong."""
    if not answers:
        return MathVerdict(correct=False, reason="no final answer found")
    last = answers[-1]
    distinct = {normalize_text(a) for a in answers}
    if len(distinct) > 3:  # hedging across many answers: wrong, and not worth one slow comparison each
        return MathVerdict(correct=False, reason=f"{len(distinct)} different final answers")
    for other in dict.fromkeys(answers[:-1]):
        if (
            normalize_text(other) != normalize_text(last)
            and not equivalent(last, other, question, None, timeout).correct
        ):
            return MathVerdict(
                correct=False, reason=f"several different final answers ({other!r} and {last!r})"
            )
    return equivalent(gold, last, question, domain, timeout)
