"""Pull the final answer out of a model response: strip thinking, then find boxed answers, answer tags or code.

A response that answers in the JSON form ZeroEval asks for (``{"reasoning": ..., "answer": ...}``, the recorded
answers of tasks/data/replay) states its answer in the ``answer`` field: when the response opens with that object,
the field is its one final answer; elsewhere the field counts only when nothing else marks an answer.

Boxes are found by tasks/answers.py, the rule the task loaders check their references with.

Every function here is pure and linear-time on its input (no regex that can backtrack catastrophically), because
responses are written by the policy under training and may be adversarial.
"""

from __future__ import annotations

import re

import msgspec

from tasks.answers import boxed_all, boxed_spans, json_answer

THINK_TAGS = ("think", "thinking", "reasoning", "thought")
_OPEN = re.compile(r"<(" + "|".join(THINK_TAGS) + r")\b[^>]{0,40}>", re.IGNORECASE)
_FINAL_CUE = re.compile(r"final answer\s*(?:is|:|：)\s*", re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})([^\n]*)\n", re.MULTILINE)
PYTHON_LANGS = {"python", "py", "python3", "py3"}
_JSON_FORM = re.compile(r"\s{0,20}(?:```(?:json)?\s{0,20})?\{")  # a response that opens with a JSON object


class Answers(msgspec.Struct, frozen=True, kw_only=True):
    """Every final-answer candidate in the answer region, in order; the last one is *the* answer."""

    items: list[str]
    source: str  # "boxed" | "answer_tag" | "final_cue" | "json" | "none"

    @property
    def last(self) -> str | None:
        return self.items[-1] if self.items else None


def strip_thinking(text: str) -> str:
    """Drop every <think>…</think> block (and the like). An unclosed block swallows the rest: thinking that never
    ended has no final answer. A stray closing tag (template put the opening one in the prompt) drops what precedes."""
    out: list[str] = []
    pos = 0
    lower = text.lower()
    while True:
        m = _OPEN.search(text, pos)
        if not m:
            out.append(text[pos:])
            break
        out.append(text[pos : m.start()])
        close = lower.find(f"</{m.group(1).lower()}>", m.end())
        if close < 0:
            break
        pos = close + len(m.group(1)) + 3
    result = "".join(out)
    low = result.lower()
    cut = 0
    for tag in THINK_TAGS:
        at = low.rfind(f"</{tag}>")
        if at >= 0:
            cut = max(cut, at + len(tag) + 3)
    return result[cut:]


def tag_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, contents)`` of every closed ``<answer>…</answer>``, by plain string search (linear)."""
    lower = text.lower()
    found, pos = [], 0
    while True:
        start = lower.find("<answer>", pos)
        if start < 0:
            return found
        end = lower.find("</answer>", start + 8)
        if end < 0:
            return found
        found.append((start, end + 9, text[start + 8 : end]))
        pos = end + 9


def answer_tags(text: str) -> list[str]:
    """Contents of every closed ``<answer>…</answer>``."""
    return [inner for _, _, inner in tag_spans(text)]


def blank(text: str, spans: list[tuple[int, int, str]]) -> str:
    """``text`` with every span replaced by spaces (same length): later searches skip what is already counted."""
    out, pos = [], 0
    for start, end, _ in spans:
        out += [text[pos:start], " " * (end - start)]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def marked_answers(region: str) -> list[tuple[int, str, str]]:
    """``(position, answer, marker kind)`` for every marked answer in the region, in order of position.

    Every marker states the answer, so all of them count: an answer tag (a box inside it is its answer), a box
    outside any tag, a "final answer:" line outside tags and boxes (a box on that line already counted).
    """
    tags = tag_spans(region)
    found = [(start, (boxed_all(inner) or [inner.strip()])[-1], "answer_tag") for start, _, inner in tags]
    rest = blank(region, tags)
    boxes = boxed_spans(rest)
    found += [(start, inner, "boxed") for start, _, inner in boxes]
    rest = blank(rest, boxes)
    for cue in _FINAL_CUE.finditer(rest):
        end = rest.find("\n", cue.end())
        end = len(rest) if end < 0 else end
        if any(cue.end() <= start < end for start, _, _ in boxes):
            continue  # "the final answer is 5 + 4 + 2 = \boxed{11}": the box on that line is the answer it states
        # "The final answer is:" then a line break: the colon is no answer (what follows, e.g. a JSON object, is)
        line = rest[cue.end() : end].strip().lstrip(":：").rstrip(".").strip().strip("$").strip()
        if line:
            found.append((cue.start(), line, "final_cue"))
    return sorted((item for item in found if item[1]), key=lambda item: item[0])


def final_answers(response: str) -> Answers:
    """Every marked final answer of the answer region (boxes, answer tags, "final answer:" lines), in order.

    Never the last number in the text: a response without an explicit final answer has none. Answers under
    different markers are not ranked against each other: a response stating two different ones has several.
    """
    region = strip_thinking(response)
    answer = json_answer(region) if _JSON_FORM.match(region) else None
    if answer is not None:  # a response in the JSON form: its answer field, not a box inside its reasoning
        return Answers(items=[(boxed_all(answer) or [answer])[-1]], source="json")
    found = marked_answers(region)
    if not found:
        answer = json_answer(region)
        if answer is not None:
            return Answers(items=[(boxed_all(answer) or [answer])[-1]], source="json")
        return Answers(items=[], source="none")
    return Answers(items=[answer for _, answer, _ in found], source=found[-1][2])


def last_python_block(response: str) -> str:
    """The last fenced Python block; else the last unlabelled block; else the whole response (thinking removed).

    An unterminated final fence (a truncated response) yields what follows it: the program will simply fail if it
    is incomplete, which is the honest outcome.
    """
    text = strip_thinking(response)
    if not text.endswith("\n"):
        text += "\n"  # every line terminated: the fence pattern then never backtracks across an open end
    python: list[str] = []
    plain: list[str] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if not m:
            break
        fence, info = m.group(1), m.group(2).strip().split()
        lang = info[0].lower() if info else ""
        close = re.compile(
            r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.MULTILINE
        )
        end = close.search(text, m.end())
        body = text[m.end() : end.start() if end else len(text)]
        if lang in PYTHON_LANGS:
            python.append(body)
        elif not lang:
            plain.append(body)
        if not end:
            break
        pos = end.end()
    if python:
        return python[-1]
    if plain:
        return plain[-1]
    return text[:-1] if text.endswith("\n") and not response.endswith("\n") else text
