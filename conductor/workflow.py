"""The workflow language: parse a Conductor completion into a ``Workflow`` and render one back (docs/method.md §1).

A completion is free-text reasoning followed by three Python list assignments::

    model_id = [2, 0]
    subtasks = ["develop an efficient algorithm ...", "implement it in Python ..."]
    access_list = [[], ["all"]]

The planner (serving and fallbacks) and the executor (scoring rollouts) both go through ``parse_completion``, so
there is exactly one definition of "a valid workflow" and one reason vocabulary for format failures (the RL reward
is 0 for any of them, docs/method.md §3).

Parsing rules, chosen to accept what real models write while never evaluating code:

* An assignment is a name (``model_id``/``model_ids``, ``subtasks``/``subtask``, ``access_list``/``access_lists``),
  optionally quoted, back-ticked or bold, then ``=``, ``:``, ``:=`` or a type annotation ``: list[int] =``, then a
  bracketed list. Code fences, comments, newlines and whitespace inside the list are fine.
* The list text is cut out with a small tokenizer (strings, brackets, comments), bare ``all`` is quoted, and the
  result goes to ``ast.literal_eval`` — never ``eval``.
* Assignments whose list is not a literal are set aside (prose like ``subtasks: [see below]`` must not break the
  real lists); the rest are grouped into attempts, an attempt ending when a name repeats. The last attempt holding
  all three names wins (a model that rewrites its plan is judged on the rewrite; a later half-written attempt does
  not poison an earlier complete one). Only the winner is checked semantically; when there is none, the last
  set-aside error (or "incomplete") is the reason.
* Access entries: ``"all"`` (any case, quoted or bare), ``["all"]``, ``[["all"]]``, ``[]`` or integer indices of
  earlier steps (normalised to a sorted, duplicate-free list). One redundant level of list nesting is unwrapped
  (``[[0, 1]]`` -> ``[0, 1]``, ``[[]]`` -> ``[]``). Anything else is a format error.

Pathological input (huge text, deep nesting, giant literals) becomes ``WorkflowFormatError``, never
``RecursionError``/``MemoryError``: the text length, list length and nesting depth are capped before parsing.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from enum import StrEnum

import msgspec

from schemas.plan import Access, Workflow

MAX_STEPS = 5
"""docs/method.md §1: a Conductor workflow has at most five steps."""

MAX_COMPLETION_CHARS = 65_536
"""Input cap. A completion is capped at 1024 tokens (docs/method.md §1), a few thousand characters; 64 KiB leaves room
for verbose tokenizers and rendered baselines while bounding the parser's work."""

MAX_LIST_CHARS = 32_768
"""One assignment's right-hand side may not span more than this; an unterminated list stops here."""

MAX_DEPTH = 6
"""Bracket nesting allowed inside one list. The deepest legitimate form is ``[[["all"]]]`` (depth 3)."""

MAX_ASSIGNMENTS = 256
"""More list assignments than this in one completion is degenerate output, not a plan."""


class FormatReason(StrEnum):
    """Why a completion is not a valid workflow; short, stable codes for metrics and rollout records."""

    TOO_LONG = "too_long"  # the completion exceeds MAX_COMPLETION_CHARS
    TOO_MANY_ASSIGNMENTS = "too_many_assignments"
    MISSING_LISTS = "missing_lists"  # no list assignment found at all
    INCOMPLETE = "incomplete"  # some of the three lists were never written
    UNTERMINATED = "unterminated"  # a list's brackets never close (or exceed MAX_LIST_CHARS)
    TOO_DEEP = "too_deep"  # nesting beyond MAX_DEPTH
    SYNTAX = "syntax"  # the list text is not a Python literal
    LENGTH_MISMATCH = "length_mismatch"
    EMPTY = "empty"  # zero steps where a workflow is required
    TOO_MANY_STEPS = "too_many_steps"
    BAD_MODEL_ID = "bad_model_id"  # not an int, or outside the pool
    BAD_SUBTASK = "bad_subtask"  # not a string, or blank
    BAD_ACCESS = "bad_access"  # not "all"/[]/earlier indices


class WorkflowFormatError(ValueError):
    """The completion does not hold a valid workflow. Deterministic: resampling may help, retrying the parse won't."""

    def __init__(self, reason: FormatReason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ParsedCompletion(msgspec.Struct, frozen=True, kw_only=True):
    reasoning: str  # the text before the winning lists (code-fence openers trimmed)
    workflow: Workflow


# --- the public API -------------------------------------------------------------------------------------------


def parse_completion(
    text: str, *, n_workers: int, max_steps: int = MAX_STEPS, allow_empty: bool = False
) -> ParsedCompletion:
    """Parse a Conductor completion. ``allow_empty`` admits three empty lists (a recursion round's hand-back)."""
    if len(text) > MAX_COMPLETION_CHARS:
        raise WorkflowFormatError(
            FormatReason.TOO_LONG,
            f"completion is {len(text)} characters; the limit is {MAX_COMPLETION_CHARS}",
        )
    start, values = _last_complete_attempt(_assignments(text))
    workflow = build_workflow(
        values["model_id"],
        values["subtasks"],
        values["access_list"],
        n_workers=n_workers,
        max_steps=max_steps,
        allow_empty=allow_empty,
    )
    return ParsedCompletion(reasoning=_reasoning(text[:start]), workflow=workflow)


def build_workflow(
    model_id: object,
    subtasks: object,
    access_list: object,
    *,
    n_workers: int,
    max_steps: int = MAX_STEPS,
    allow_empty: bool = False,
) -> Workflow:
    """Check and normalise three literal values into a ``Workflow`` (docs/method.md §1, ours)."""
    ids, tasks, access = (
        _as_list(n, v) for n, v in zip(_NAMES, (model_id, subtasks, access_list), strict=True)
    )
    n = len(ids)
    if len(tasks) != n or len(access) != n:
        raise WorkflowFormatError(
            FormatReason.LENGTH_MISMATCH,
            f"lists differ in length (model_id={n}, subtasks={len(tasks)}, access_list={len(access)})",
        )
    if n == 0 and not allow_empty:
        raise WorkflowFormatError(FormatReason.EMPTY, "the workflow has no steps")
    if n > max_steps:
        raise WorkflowFormatError(FormatReason.TOO_MANY_STEPS, f"{n} steps; at most {max_steps} allowed")
    return Workflow(
        model_id=[_model_id(v, i, n_workers) for i, v in enumerate(ids)],
        subtasks=[_subtask(v, i) for i, v in enumerate(tasks)],
        access_list=[_access(v, i) for i, v in enumerate(access)],
    )


def validate_workflow(
    workflow: Workflow, *, n_workers: int, max_steps: int = MAX_STEPS, allow_empty: bool = False
) -> None:
    """Re-check a ``Workflow`` that arrived as a struct (e.g. decoded from a PlanReply) against the same rules."""
    checked = build_workflow(
        list(workflow.model_id),
        list(workflow.subtasks),
        [a if a == "all" else list(a) for a in workflow.access_list],
        n_workers=n_workers,
        max_steps=max_steps,
        allow_empty=allow_empty,
    )
    if checked != workflow:
        raise WorkflowFormatError(FormatReason.BAD_ACCESS, "access indices must be sorted and unique")


def render_workflow(workflow: Workflow) -> str:
    """The three assignments exactly as a Conductor would write them; ``parse_completion`` reads them back."""
    return "\n".join(
        [
            f"model_id = [{', '.join(str(m) for m in workflow.model_id)}]",
            f"subtasks = [{', '.join(_string_literal(s) for s in workflow.subtasks)}]",
            f"access_list = [{', '.join(_render_access(a) for a in workflow.access_list)}]",
        ]
    )


def render_completion(reasoning: str, workflow: Workflow) -> str:
    """Reasoning, then the lists in a Python code fence — the shape of the paper's example completions."""
    lists = f"```python\n{render_workflow(workflow)}\n```"
    reasoning = reasoning.strip()
    return f"{reasoning}\n\n{lists}" if reasoning else lists


# --- finding the assignments ----------------------------------------------------------------------------------

_CANONICAL = {
    "model_id": "model_id",
    "model_ids": "model_id",
    "subtasks": "subtasks",
    "subtask": "subtasks",
    "access_list": "access_list",
    "access_lists": "access_list",
}
_NAMES = ("model_id", "subtasks", "access_list")

_ASSIGNMENT = re.compile(
    r"""
    (?<![\w.])[\"'`*]{0,3}
    (?P<name>model_ids?|subtasks?|access_lists?)
    [\"'`*]{0,3}[ \t]*
    (?::[ \t]*[A-Za-z_][\w\[\]., |]{0,40}?[ \t]*=|:=|:|=)   # `=`, `:`, `:=` or `: list[int] =`
    \s*(?=\[)
    """,
    re.VERBOSE,
)

_STRING = r"""[rRuUbB]{0,2}(?:\"\"\"(?:[^"\\]|\\.|"(?!""))*\"\"\"|'''(?:[^'\\]|\\.|'(?!''))*'''|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
_TOKEN = re.compile(
    rf"""
    (?P<str>{_STRING})
    |(?P<open>[\[({{])
    |(?P<close>[\])}}])
    |(?P<comment>\#[^\n]*)
    |(?P<name>[A-Za-z_]\w*)
    |(?P<other>[^\[\](){{}}"'\#A-Za-z_]+)
    |(?P<bad>["'])
    """,
    re.VERBOSE | re.DOTALL,
)
_PAIRS = {"]": "[", ")": "(", "}": "{"}
_EXPRESSION_TAIL = re.compile(r"[ \t]*(?:[*+](?!\*)[ \t]*[\w(\[]|\[|\.(?=[A-Za-z_]))")
"""What turns a list into an expression (``[0] * 6``, ``[..] + [..]``, ``[..][0]``, ``[..].copy()``) without
catching prose or markdown after it (``[0].``, ``[0]**``)."""


class _Assignment(msgspec.Struct, frozen=True):
    name: str  # canonical
    start: int  # where the assignment (its name) begins in the completion
    end: int  # just past the closing bracket, or the match end when the list did not parse
    value: object = None
    error: WorkflowFormatError | None = None


def _assignments(text: str) -> list[_Assignment]:
    """Every list assignment in text order; assignments inside an earlier parsed list's strings are skipped."""
    found: list[_Assignment] = []
    consumed = 0
    for m in _ASSIGNMENT.finditer(text):
        if m.start() < consumed:
            continue
        if len(found) >= MAX_ASSIGNMENTS:
            raise WorkflowFormatError(
                FormatReason.TOO_MANY_ASSIGNMENTS, f"more than {MAX_ASSIGNMENTS} list assignments"
            )
        name = _CANONICAL[m.group("name")]
        try:
            source, end = _cut_list(text, m.end())
            value = _literal(source)
        except WorkflowFormatError as exc:
            found.append(_Assignment(name, m.start(), m.end(), error=exc))
            continue
        found.append(_Assignment(name, m.start(), end, value=value))
        consumed = end
    return found


def _cut_list(text: str, pos: int) -> tuple[str, int]:
    """The bracketed list starting at ``pos``, with comments dropped and bare ``all`` quoted, and its end offset."""
    limit = min(len(text), pos + MAX_LIST_CHARS)
    stack: list[str] = []
    out: list[str] = []
    while pos < limit:
        m = _TOKEN.match(text, pos, limit)
        if m is None or m.lastgroup == "bad":
            raise WorkflowFormatError(FormatReason.UNTERMINATED, "a string in the list never closes")
        kind, tok, pos = m.lastgroup, m.group(), m.end()
        if kind == "open":
            stack.append(tok)
            if len(stack) > MAX_DEPTH:
                raise WorkflowFormatError(FormatReason.TOO_DEEP, f"lists nested deeper than {MAX_DEPTH}")
        elif kind == "close":
            if not stack or stack.pop() != _PAIRS[tok]:
                raise WorkflowFormatError(FormatReason.SYNTAX, f"unbalanced {tok!r}")
        elif kind == "name" and tok.lower() == "all":
            tok = '"all"'
        elif kind == "comment":
            tok = ""
        out.append(tok)
        if not stack:
            if _EXPRESSION_TAIL.match(text, pos):
                raise WorkflowFormatError(
                    FormatReason.SYNTAX, "the list is part of an expression, not a literal"
                )
            return "".join(out), pos
    raise WorkflowFormatError(FormatReason.UNTERMINATED, "a list's brackets never close")


def _literal(source: str) -> object:
    """``ast.literal_eval`` with every failure it can raise on hostile input mapped to the one format error."""
    try:
        with warnings.catch_warnings():  # invalid escapes like "\=" only warn; the value is still a literal
            warnings.simplefilter("ignore")
            return ast.literal_eval(source)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        first = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise WorkflowFormatError(FormatReason.SYNTAX, f"not a Python literal ({first})") from None


def _last_complete_attempt(found: list[_Assignment]) -> tuple[int, dict[str, object]]:
    """The start offset and values of the last attempt that assigns all three lists successfully."""
    if not found:
        raise WorkflowFormatError(
            FormatReason.MISSING_LISTS,
            "no `model_id = [...]`, `subtasks = [...]`, `access_list = [...]` found",
        )
    attempts: list[dict[str, _Assignment]] = [{}]
    for a in found:
        if a.error is not None:
            continue
        if a.name in attempts[-1]:
            attempts.append({})
        attempts[-1][a.name] = a
    for attempt in reversed(attempts):
        if len(attempt) == len(_NAMES):
            return min(a.start for a in attempt.values()), {k: a.value for k, a in attempt.items()}
    errors = [a.error for a in found if a.error is not None]
    if errors:
        raise errors[-1]
    missing = [n for n in _NAMES if n not in attempts[-1]]
    raise WorkflowFormatError(FormatReason.INCOMPLETE, f"missing {', '.join(missing)}")


_FENCE_TAIL = re.compile(r"(?:\n|^)[ \t]*```[\w+-]*[ \t]*\Z")


def _reasoning(prefix: str) -> str:
    """The plan text before the lists, without a dangling code-fence opener."""
    return _FENCE_TAIL.sub("", prefix.rstrip()).strip()


# --- semantic checks ------------------------------------------------------------------------------------------


def _as_list(name: str, value: object) -> list[object]:
    if not isinstance(value, list):
        raise WorkflowFormatError(FormatReason.SYNTAX, f"{name} is a {type(value).__name__}, not a list")
    return value


def _model_id(value: object, step: int, n_workers: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkflowFormatError(FormatReason.BAD_MODEL_ID, f"model_id[{step}] is not an integer")
    if not 0 <= value < n_workers:
        raise WorkflowFormatError(
            FormatReason.BAD_MODEL_ID, f"model_id[{step}] = {value} is outside the pool (0..{n_workers - 1})"
        )
    return value


def _subtask(value: object, step: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WorkflowFormatError(FormatReason.BAD_SUBTASK, f"subtasks[{step}] is not a non-empty string")
    return value


def _is_all(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == "all"


def _access(value: object, step: int) -> Access:
    """``"all"`` | ``["all"]`` | ``[["all"]]`` | ``[]`` | indices of earlier steps, as docs/method.md §1 decides."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]  # one redundant level: [["all"]], [[]], [[0, 1]]
    if _is_all(value) or (isinstance(value, list) and len(value) == 1 and _is_all(value[0])):
        return "all"
    if not isinstance(value, list):
        raise WorkflowFormatError(FormatReason.BAD_ACCESS, f'access_list[{step}] is not "all" or a list')
    for j in value:
        if isinstance(j, bool) or not isinstance(j, int) or not 0 <= j < step:
            raise WorkflowFormatError(
                FormatReason.BAD_ACCESS, f"access_list[{step}] may only name earlier steps 0..{step - 1}"
            )
    return sorted(set(value))


# --- rendering ------------------------------------------------------------------------------------------------


def _string_literal(s: str) -> str:
    """A double-quoted literal (what models write); JSON escapes are valid Python escapes, except that lone
    surrogates cannot be written raw, so those strings are fully escaped."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(s, ensure_ascii=True)
    return json.dumps(s, ensure_ascii=False)


def _render_access(access: Access) -> str:
    if access == "all":
        return '["all"]'
    return f"[{', '.join(str(j) for j in access)}]"
