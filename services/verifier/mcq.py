"""Multiple-choice grading (GPQA, MMLU): find the letter the response commits to, never guess one.

A letter counts only when the response states it as its answer: "Answer: C", "the correct option is (C)",
"**C**" alone on a line, ``\\boxed{C}``, ``<answer>C</answer>``, or a short response that is just a letter. Stray
capitals ("I think", "Option A is wrong") and option texts never count. A response that states several different
letters is wrong, not right: hedging must not pay, and that holds across markers (a boxed letter and a
different "Answer:" letter are two answers).
"""

from __future__ import annotations

import re
import unicodedata

import msgspec

from services.verifier.extract import blank, strip_thinking, tag_spans
from tasks.answers import boxed_all, boxed_spans

LETTERS = "ABCDEFGHIJ"
# Responses are adversarial, so every pattern is run on a short window after a literal cue, and no two adjacent
# quantifiers share characters (no catastrophic backtracking, whatever the input).
_CUE = re.compile(
    r"\b(?:answer|correct (?:option|choice|letter)|best (?:option|choice|answer)|right (?:option|choice))\b",
    re.IGNORECASE,
)
_STATED = re.compile(
    r"(?i:\s{1,3}(?:is|would be|should be)\b)?"
    r"[ \t:=*_`$\\(\[{-]{0,12}"
    r"(?:(?i:option|choice|letter)\b[ \t:*_`$\\(\[{]{0,8})?"
    r"(?:text(?:bf)?\{[ \t*_`(\[{]{0,4})?"
    r"(?:(?P<upper>[A-J])(?![A-Za-z0-9])|(?P<lower>[a-j])(?=[ \t*_`)\]}.,;:!]{0,8}(?:$|\n)|[)\]}.,;:!]))"
)
_MORE = re.compile(r"[ \t)\]}*_`]{0,6}(?:,|\band\b|\bor\b|/|&)[ \t*_`(\[]{0,6}([A-J])(?![A-Za-z0-9])")
_BARE_LINE = re.compile(r"[ \t*_`>#-]{0,12}[(\[]?[ \t]{0,3}([A-J])[ \t]{0,3}[)\]]?[ \t*_`.:]{0,12}")
_LEADING = re.compile(r"[ \t*_`]{0,12}[(\[]?([A-J])(?:[)\].:]|[ \t]*$)")
WINDOW = 80
SHORT_RESPONSE = 200


class Choice(msgspec.Struct, frozen=True, kw_only=True):
    letters: list[str]  # every distinct letter the response states as its answer, in order of first statement
    source: str  # "answer_tag" | "boxed" | "cue" | "bare_line" | "leading" | "none"


def normalize(text: str) -> str:
    """NFKC folds full-width letters, colons and brackets ("Ａｎｓｗｅｒ：（Ｃ）") into ASCII."""
    return unicodedata.normalize("NFKC", text)


def letter_of(fragment: str) -> list[str]:
    """Letters in a short answer fragment such as "C", "(c)", "\\text{C}", "A, C"; [] when it is not letters."""
    cleaned = re.sub(r"\\text(?:bf)?\{([^{}]*)\}", r"\1", normalize(fragment))
    cleaned = re.sub(r"[\s$*_`()\[\]{}.]", "", cleaned)
    parts = [p for p in re.split(r",|/|&|\band\b|\bor\b", cleaned) if p]
    if parts and all(len(p) == 1 and p.upper() in LETTERS for p in parts):
        return [p.upper() for p in parts]
    return []


def _dedupe(letters: list[str]) -> list[str]:
    return list(dict.fromkeys(letters))


def extract_choice(response: str) -> Choice:
    """Every letter the response states under any marker (answer tags, boxes, cues), in order of position; only
    when none is marked, a letter alone on a line or a short response that is just a letter."""
    region = normalize(strip_thinking(response))
    tags = tag_spans(region)
    marked = [(start, letter_of((boxed_all(inner) or [inner])[-1]), "answer_tag") for start, _, inner in tags]
    rest = blank(region, tags)
    boxes = boxed_spans(rest)
    marked += [(start, letter_of(inner), "boxed") for start, _, inner in boxes]
    marked += [(at, [letter], "cue") for at, letter in _cued_letters(blank(rest, boxes))]
    marked.sort(key=lambda item: item[0])
    letters = [letter for _, found, _ in marked for letter in found]
    if letters:
        return Choice(
            letters=_dedupe(letters), source=next(kind for _, found, kind in reversed(marked) if found)
        )
    bare = [
        m.group(1)
        for line in region.splitlines()
        if len(line) <= WINDOW and (m := _BARE_LINE.fullmatch(line))
    ]
    if bare:
        return Choice(letters=_dedupe(bare), source="bare_line")
    stripped = region.strip()
    lead = _LEADING.match(stripped[:WINDOW])
    if lead and len(stripped) <= SHORT_RESPONSE:
        return Choice(letters=[lead.group(1)], source="leading")
    return Choice(letters=[], source="none")


def _cued_letters(text: str) -> list[tuple[int, str]]:
    """``(position, letter)`` for letters stated after an answer cue ("Answer: C", "the correct option is (C)")."""
    stated: list[tuple[int, str]] = []
    for cue in _CUE.finditer(text):
        window = text[cue.end() : cue.end() + WINDOW]
        m = _STATED.match(window)
        if not m:
            continue
        stated.append((cue.start(), (m.group("upper") or m.group("lower")).upper()))
        more = _MORE.match(window, m.end())
        while more:
            stated.append((cue.start(), more.group(1).upper()))
            more = _MORE.match(window, more.end())
    return stated


def gold_letter(answer: str) -> str | None:
    letters = letter_of(answer)
    return letters[0] if len(letters) == 1 else None


def grade(response: str, gold: str, n_choices: int | None) -> tuple[bool, str, str | None]:
    """(correct, reason, extracted letter)."""
    choice = extract_choice(response)
    if not choice.letters:
        return False, "no answer letter found", None
    if len(choice.letters) > 1:
        return (
            False,
            f"several different letters stated: {', '.join(choice.letters)}",
            ",".join(choice.letters),
        )
    letter = choice.letters[0]
    if n_choices is not None and LETTERS.index(letter) >= n_choices:
        return False, f"letter {letter} is not one of the {n_choices} options", letter
    if letter == gold:
        return True, f"letter {letter} ({choice.source})", letter
    return False, f"letter {letter} ({choice.source}), expected {gold}", letter
