"""A user's own tasks: one JSON object per line, read through a field mapping, scored by the verifier type named.

The verifier type is one of the reference kinds the verifier scores (schemas/verify.py):

- ``auto`` | ``math`` | ``mcq`` | ``exact``: a ``TextReference`` of the record's ``answer`` (and ``choices``, a list
  of option texts in letter order, when given), checked by that kind;
- ``stdio`` | ``functional`` | ``unittest`` | ``humaneval``: that code reference, its fields read from the record
  under their own names (``tests`` as a list of ``{input, output}``, ``func_name``, ``starter_code``, ``test``,
  ``entry_point``, ``code_prompt``, ``libs``, ``prompt``).

A record holds ``question`` and, optionally, ``id`` (default: its line number), ``domain`` (default: the source's
``domain``, else the verifier type's — ``math``, ``mcq``, ``general`` or ``code``), ``subject`` and ``level``.
``fields`` renames any of these to the record's own key (``{question = "prompt", answer = "solution"}``). The
domain picks the answer-format instruction the registry adds to the question (conductor/answer_format.py). Every
malformed record is a ``DatasetError`` naming ``file:line``.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    Reference,
    StdioTestsReference,
    TextReference,
    UnittestReference,
)
from tasks.errors import DatasetError, TaskError
from tasks.problem import Problem
from tasks.rows import numbered_rows

TEXT_KINDS = ("auto", "math", "mcq", "exact")
CODE_REFERENCES: dict[str, type[msgspec.Struct]] = {
    "stdio": StdioTestsReference,
    "functional": FunctionalTestsReference,
    "unittest": UnittestReference,
    "humaneval": HumanEvalReference,
}
VERIFIERS = (*TEXT_KINDS, *CODE_REFERENCES)
DEFAULT_DOMAIN = {"math": "math", "mcq": "mcq", "exact": "general", "auto": "general"} | dict.fromkeys(
    CODE_REFERENCES, "code"
)
PROBLEM_FIELDS = ("id", "question", "domain", "subject", "level")


def reference_fields(verifier: str) -> tuple[str, ...]:
    """The record fields the verifier type reads its reference from."""
    if verifier in TEXT_KINDS:
        return ("answer", "choices")
    return tuple(CODE_REFERENCES[verifier].__struct_fields__)


def check(verifier: str, fields: dict[str, str]) -> None:
    """A ``TaskError`` naming an unknown verifier type or a mapping of a field no record of that type has."""
    if verifier not in VERIFIERS:
        raise TaskError(f"unknown verifier type {verifier!r}; known: {', '.join(VERIFIERS)}")
    known = (*PROBLEM_FIELDS, *reference_fields(verifier))
    if unknown := sorted(set(fields) - set(known)):
        raise TaskError(
            f"fields maps {unknown}, which a {verifier!r} task does not have; it has {', '.join(known)}"
        )


def load(
    path: str | Path, *, verifier: str = "auto", domain: str = "", fields: dict[str, str] | None = None
) -> list[Problem]:
    """The file's tasks, in file order; ids are ``<file stem>/<record id or line>`` and must be unique."""
    fields = fields or {}
    check(verifier, fields)
    path = Path(path)
    problems: list[Problem] = []
    lines: dict[str, int] = {}
    for line, row in numbered_rows(path):
        try:
            problem = _problem(row, line, path.stem, verifier, domain or DEFAULT_DOMAIN[verifier], fields)
        except DatasetError as exc:
            raise DatasetError(f"{path}:{line}: {exc}") from exc
        if problem.id in lines:
            raise DatasetError(f"{path}:{line}: id {problem.id!r} already on line {lines[problem.id]}")
        lines[problem.id] = line
        problems.append(problem)
    if not problems:
        raise DatasetError(f"{path}: no records")
    return problems


def _problem(row: dict, line: int, stem: str, verifier: str, domain: str, fields: dict[str, str]) -> Problem:
    def get(name: str, default: object = None) -> object:
        return row.get(fields.get(name, name), default)

    question = get("question")
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(
            f"no question text under {fields.get('question', 'question')!r}: has {sorted(row)[:12]}"
        )
    return Problem(
        id=f"{stem}/{get('id', line)}",
        benchmark="jsonl",
        question=question,
        reference=_reference(row, verifier, fields),
        domain=str(get("domain") or domain),
        subject=str(get("subject", "")),
        level=str(get("level", "")),
    )


def _reference(row: dict, verifier: str, fields: dict[str, str]) -> Reference:
    values = {
        name: row[fields.get(name, name)]
        for name in reference_fields(verifier)
        if row.get(fields.get(name, name)) is not None
    }
    if verifier in TEXT_KINDS:
        if "answer" not in values or not str(values["answer"]).strip():
            raise DatasetError(f"no answer under {fields.get('answer', 'answer')!r}: has {sorted(row)[:12]}")
        values = {**values, "answer": str(values["answer"]), "kind": verifier}
        cls: type[msgspec.Struct] = TextReference
    else:
        cls = CODE_REFERENCES[verifier]
    try:
        return msgspec.convert(values, cls)  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        raise DatasetError(f"not a {verifier!r} reference: {exc}") from exc
