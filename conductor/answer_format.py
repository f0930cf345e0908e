r"""Answer-format instructions for workers: tell a real model how to mark its final answer so the verifier finds it.

The verifier never guesses an answer (services/verifier/extract.py, mcq.py): math needs ``\boxed{..}`` (or an
``<answer>`` tag / ``Final answer:`` line), multiple choice a stated letter (``Answer: X``), code one fenced Python
program. Sim workers always mark their answers; real ones do so only when told — SmolLM2 on vLLM writes "The answer
is 156" and scores incorrect. So when a task has a domain, the executor appends that domain's instruction to a
step's own user turn (services/executor/messages.py is the one place it is added).

Which steps (the pool's ``[answer_format] steps``):

- ``"all"`` (default): the final step gets the firm wording ("Finish your response with ..."); earlier steps get a
  conditional one ("If you reach an answer, ..."). The final step's response *is* the answer, so it must be marked.
  Earlier steps are marked too because aggregation works on marked answers: a later step that reviews or combines
  earlier ones (and the sim's evidence model) compares stated answers, and when a round stops early the latest
  finished step's response becomes the answer. The conditional wording leaves a planning or fact-listing step free.
- ``"final"``: only the final step of each round.
- ``"off"``: no instruction (a pool of workers fine-tuned to a format, or sim pools kept byte-identical).

Never doubled: no instruction when the question or the step's own subtask already asks for the domain's marker
(``carries_format``), e.g. a GPQA prompt ending "Answer: $LETTER" or a Conductor subtask saying "put it in \boxed{}".
The wording avoids review words ("check", "final answer", ...) on purpose: the sim treats a subtask containing them
as a review step, and an instruction must not change what a step is asked to do.
"""

from __future__ import annotations

import re
from typing import Literal

import msgspec

StepScope = Literal["all", "final", "off"]


class DomainFormat(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The instruction for one format family: ``final`` for a round's last step, ``earlier`` for the others."""

    final: str
    earlier: str | None = None  # None: the final wording on every step that gets one

    def text(self, *, final: bool) -> str:
        return self.final if final or self.earlier is None else self.earlier


# Format families and the task domains that use each (the domains tasks/registry.py's entries and the verifier's
# MCQ_DOMAINS name). An unknown domain gets no instruction: we do not know what its verifier accepts.
FAMILY_OF_DOMAIN: dict[str, str] = {
    "math": "math",
    "math500": "math",
    "aime": "math",
    "deepmath": "math",
    "mcq": "mcq",
    "multiple_choice": "mcq",
    "gpqa": "mcq",
    "gpqa_diamond": "mcq",
    "mmlu": "mcq",
    "mmlu_pro": "mcq",
    "code": "code",
    "livecodebench": "code",
    "bigcodebench": "code",
    "general": "general",
    "rlpr": "general",
    "literal": "general",  # a Python literal (CRUXEval; tasks/answers.py LITERAL_DOMAIN)
}
FAMILIES = ("math", "mcq", "code", "general")

# Wording measured with SmolLM2-135M on vLLM (scripts/vllm/measure_formats.py; figures in docs/results.md): no example
# value ("for example \\boxed{42}" was copied verbatim as the answer) and no placeholder letter ("Answer: X" came
# back as "X").
DEFAULT_FORMATS: dict[str, DomainFormat] = {
    "math": DomainFormat(
        final="Finish your response with the answer written as \\boxed{...}.",
        earlier="If you reach an answer, finish your response with it written as \\boxed{...}.",
    ),
    "mcq": DomainFormat(
        final='Finish your response with a line "Answer: " followed by the letter of the option you choose.',
        earlier='If you choose an option, finish your response with a line "Answer: " followed by its letter.',
    ),
    "code": DomainFormat(
        final="Give your solution as one complete Python program in a single ```python code block.",
        earlier="If you write a solution, give it as one complete Python program in a single ```python code block.",
    ),
    "general": DomainFormat(
        final="Finish your response with the answer inside <answer></answer> tags.",
        earlier="If you reach an answer, finish your response with it inside <answer></answer> tags.",
    ),
}

# What "already asks for the marker" looks like, per family. Patterns are anchored on short literal cues and have
# no nested quantifiers (questions can be long and user-written).
_CARRIES: dict[str, re.Pattern[str]] = {
    "math": re.compile(r"\\boxed|\bboxed\b|<answer>", re.IGNORECASE),
    "mcq": re.compile(
        r"\banswer\s{0,3}:[^\n]{0,40}\b(?:letter|choice|option)\b|\banswer\s{0,3}:\s{0,3}['\"$(\[<{]{0,3}x\b"
        r"|\\boxed|<answer>",
        re.IGNORECASE,
    ),
    "code": re.compile(r"```|\bcode block\b|\bdelimiters\b", re.IGNORECASE),
    "general": re.compile(r"<answer>|\\boxed|\bfinal answer\s{0,3}:", re.IGNORECASE),
}


class AnswerFormat(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A pool's ``[answer_format]`` table. ``instructions`` replaces the wording of a family (math, mcq, code,
    general), e.g. ``[answer_format.instructions.math] final = "..."``."""

    steps: StepScope = "all"
    instructions: dict[str, DomainFormat] = {}

    def formats(self) -> dict[str, DomainFormat]:
        return {**DEFAULT_FORMATS, **self.instructions}

    def for_step(self, domain: str | None, question: str, subtask: str, *, final: bool) -> str | None:
        """The instruction this step's prompt carries, or None (no domain, unknown domain, scope, already asked)."""
        family = family_of(domain)
        if family is None or self.steps == "off" or (self.steps == "final" and not final):
            return None
        if carries_format(family, question) or carries_format(family, subtask):
            return None
        return self.formats()[family].text(final=final)


def family_of(domain: str | None) -> str | None:
    return FAMILY_OF_DOMAIN.get((domain or "").strip().lower())


def carries_format(family: str, text: str) -> bool:
    """Whether ``text`` already asks for (or shows) the family's answer marker."""
    return bool(_CARRIES[family].search(text))


def unknown_families(fmt: AnswerFormat) -> list[str]:
    """Instruction keys the pool file names that are not format families (a typo would silently do nothing)."""
    return sorted(set(fmt.instructions) - set(FAMILIES))


# What a question's own text says its answer type is (``answer_type``): lettered options; a program to write; a
# quantity. Short literal cues, no nested quantifiers.
_OPTION = re.compile(r"(?m)^[ \t]{0,4}\(?([A-J])[).:]\s")
_INLINE_OPTION = re.compile(r"\(([A-J])\)\s")
_CODE_CUES = re.compile(
    r"```|\bexample input\b|\bstandard input\b|\bstdin\b|\bstarter code\b|\bdef [a-z_]+\("
    r"|\b(?:write|implement|complete) (?:a |the )?(?:python )?(?:function|program|script|class)\b",
    re.IGNORECASE,
)
_IO_LINES = (  # a programming task's "Input ... Output" blocks (LiveCodeBench, Codeforces, LeetCode)
    re.compile(r"(?m)^[ \t]{0,4}(?:sample |example )?input\b", re.IGNORECASE),
    re.compile(r"(?m)^[ \t]{0,4}(?:sample |example )?output\b", re.IGNORECASE),
)
_MATH_CUES = re.compile(
    r"\\boxed|\\frac|\\sqrt|\$[^$\n]{1,80}\$|\d|\^|="
    r"|\b(?:how many|probability|number of|sum of|remainder|evaluate|compute|simplify|solve for|integers?)\b",
    re.IGNORECASE,
)


def _lettered(letters: list[str]) -> bool:
    """Options A, B, ... in order: at least A and B."""
    seen = "".join(dict.fromkeys(letters))
    return len(seen) >= 2 and "ABCDEFGHIJ".startswith(seen)


def answer_type(question: str) -> str | None:
    """The answer type a question's own text shows, for a request that names none (a plain chat request to the
    gateway): ``mcq`` when it lists lettered options (A, B, ... in order) or asks for a letter, ``code`` when it asks
    for a program or shows input and output blocks (unless it asks for an ``<answer>`` tag: ``general``, as when it
    asks for a program's output as a literal), ``math`` when
    it asks for a boxed answer or holds a quantity, else None. A policy trained with the answer type in its prompt
    routes on that line (without it, `smollm2-views2` sent 16 of 26 math questions to the knowledge model); this
    gives it back what the question already says. Never used to judge an answer."""
    if _lettered(_OPTION.findall(question)) or _lettered(_INLINE_OPTION.findall(question)):
        return "mcq"
    if _CARRIES["mcq"].search(question) and not _CARRIES["math"].search(question):
        return "mcq"
    # asked for a tagged answer: "general", even about a program (CRUXEval asks for its output as a literal)
    if "<answer>" in question.lower():
        return "general"
    if _CODE_CUES.search(question) or all(p.search(question) for p in _IO_LINES):
        return "code"
    if _MATH_CUES.search(question):
        return "math"
    return None
