r"""Each step's final answer, short, as a recursion round shows it (docs/method.md §5; issue 33, item 5).

The second round's prompt lists every first-round step's final answer on one line and says whether they agree
(conductor/prompt.py), so a small Conductor decides from the results — hand back when the cheap attempts agree,
escalate when they do not — without reading whole responses. The executor (a served recursion) and the learner (a
forced second round) both build the list here, so the policy is trained on what it is served.

This is what the Conductor is *shown*, not a grade: the verifier's extractors (services/verifier/extract.py,
mcq.py) stay the judge; this reads in their order: a response that opens with a JSON object answers in its
``"answer"`` field (how ZeroEval's prompts ask for it: the replay tables' recorded answers), else the last
``\boxed{}``, else the last "answer:"/"final answer:" line, else a JSON ``"answer"`` anywhere; for multiple choice
the letter it names. Pure and linear-time: responses may be adversarial.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from schemas.plan import StepAnswer
from schemas.solve import StepRecord
from tasks.answers import boxed_all, json_answer

SHORT_LETTER_REPLY = 20
"""A multiple-choice reply this short with no marked answer is read as the letter it starts with ("C", "(B) x")."""

MAX_SHOWN_ANSWER_CHARS = 120
"""A step's answer is shown up to this length: a final answer, not a derivation."""

_CUE_LINE = re.compile(
    r"(?im)^[ \t*#>-]*(?:the\s+)?(?:final\s+answer|answer)(?:\s+is)?\s*[:：]?\s*(\S[^\n]{0,400})$"
)
_LETTER = re.compile(r"^\(?([A-J])(?:[).:\s]|$)")
_JSON_FORM = re.compile(r"\s{0,20}(?:```(?:json)?\s{0,20})?\{")
_THINK_END = re.compile(r"</(?:think|thinking|reasoning|thought)>", re.IGNORECASE)


def _found(response: str) -> str | None:
    """The verifier's reading order (services/verifier/extract.py): a response that opens with a JSON object answers
    in its ``answer`` field; otherwise the last box, else the last answer line, else a JSON ``answer`` anywhere."""
    # Every closing tag holds "</": without it there is none to look for (the executor reads each step's response).
    text = response[m.end() :] if "</" in response and (m := _last(_THINK_END, response)) else response
    if _JSON_FORM.match(text) and (found := json_answer(text)) is not None:
        return (boxed_all(found) or [found])[-1]
    if boxes := boxed_all(text):
        return boxes[-1]
    if cues := cue_lines(text):
        return cues[-1].strip().rstrip(".").strip("$* ")
    found = json_answer(text)
    return (boxed_all(found) or [found])[-1] if found is not None else None


def cue_lines(text: str) -> list[str]:
    """``_CUE_LINE.findall(text)``, trying the pattern only where it can start: at a line's start (its ``^``),
    rather than at every character as ``findall`` does. Same matches, in the same order."""
    found = []
    pos = 0
    while True:
        if (m := _CUE_LINE.match(text, pos)) is not None:
            found.append(m.group(1))
            pos = m.end()  # at a line's end: the next try is at the next line's start
        end = text.find("\n", pos)
        if end < 0:
            return found
        pos = end + 1


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 — the last match is the one wanted
        pass
    return found


def stated_answer(response: str, domain: str | None = None) -> str | None:
    """The final answer a response states, whole (the letter for multiple choice); None when it states none."""
    found = _found(response)
    if not found and domain == "mcq" and len(response.strip()) <= SHORT_LETTER_REPLY:
        found = response.strip()  # a reply that is just the letter (HELM's recorded answers: "C")
    if not found:
        return None
    if domain == "mcq" and (letter := _LETTER.match(found.strip())):
        return letter.group(1)
    return found


def step_answer(response: str, domain: str | None = None) -> str | None:
    """The final answer a response states, compacted to one short line; None when it states none."""
    found = stated_answer(response, domain)
    if not found:
        return None
    flat = " ".join(found.split())
    return flat if len(flat) <= MAX_SHOWN_ANSWER_CHARS else flat[: MAX_SHOWN_ANSWER_CHARS - 1] + "…"


def step_answers(steps: Sequence[StepRecord], domain: str | None = None) -> list[StepAnswer]:
    """What a recursion round shows of a finished round: each step's ordinal and its final answer."""
    return [
        StepAnswer(step=s.index, model_id=s.model_id, answer=step_answer(s.response, domain)) for s in steps
    ]
