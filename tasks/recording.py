"""Recorded answers written as a replay table (docs/replay.md): `conductor record`'s output and serve-to-learn's.

A table is gzip JSON Lines, one question per line, in the shipped tables' format (``../shared/replay/README.md``,
"Format"): ``{id, set, question, prompt, choices, gold, answers: {model: {text, chars}}}``. What a recording adds,
all optional, so a reader of the shipped format reads it unchanged: per answer ``prompt`` (only where it differs
from the record's), ``input_tokens``, ``output_tokens`` and ``cost_usd`` as the worker-adapter billed them; per
record ``domain``, the full ``reference`` (so code items are re-graded by their tests, not by ``gold``) and
``more_answers`` (a worker's 2nd..k-th answers when recorded k times; ``answers`` holds its first).

Writes are safe to interrupt: a recording run appends each finished answer to a journal beside the table
(``TABLE.partial``, one one-answer record a line, flushed per line) and folds it into the table at the end by
writing a temporary file and renaming it over the table. A journal left by a killed run is folded by the next one;
its cut-off last line is dropped (that answer is recorded again). Serve-to-learn appends one gzip member per task
in a single ``O_APPEND`` write, which a gzip reader reads as one stream.
"""

from __future__ import annotations

import gzip
import os
import threading
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from schemas.verify import Reference, TextReference
from tasks.replay import ReplayAnswer, ReplayError, ReplayRecord


class RecordError(ReplayError):
    """A table that cannot be read or written, or a record that contradicts the table (a different question)."""


class Answer(ReplayAnswer, frozen=True, kw_only=True, omit_defaults=True):
    """``ReplayAnswer`` with what a recording knows besides the text."""

    prompt: str | None = None  # the exact prompt, where it differs from the record's
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


class Record(ReplayRecord, frozen=True, kw_only=True, omit_defaults=True):
    """``ReplayRecord`` with a recording's answers and extras; ``prompt`` and ``choices`` always written (null
    included), as the format has them."""

    answers: dict[str, Answer]
    prompt: str | None
    choices: list[str] | None
    domain: str | None = None
    reference: Reference | None = None
    more_answers: dict[str, list[Answer]] = msgspec.field(default_factory=dict)


Table = dict[tuple[str, str], Record]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Record)


def gold_of(reference: Reference) -> str:
    """The ``gold`` field: a text reference's answer; a test-based one as its JSON (``reference`` has it typed)."""
    if isinstance(reference, TextReference):
        return reference.answer
    return _encoder.encode(reference).decode()


def answer(
    text: str, prompt: str | None, *, input_tokens: int, output_tokens: int, cost_usd: float
) -> Answer:
    return Answer(
        text=text,
        chars=len(text),
        prompt=prompt,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost_usd,
    )


def record(
    *,
    set_name: str,
    item_id: str,
    question: str,
    reference: Reference,
    domain: str | None,
    answers: Iterable[tuple[str, Answer]],
) -> Record:
    """One question's record from its (worker, answer) pairs in order: a worker's first answer goes in ``answers``,
    later ones in ``more_answers``; the record's ``prompt`` is the first answer's, kept per answer only where
    another differs."""
    pairs = list(answers)
    prompt = pairs[0][1].prompt if pairs else None
    first: dict[str, Answer] = {}
    more: dict[str, list[Answer]] = {}
    for worker, ans in pairs:
        ans = ans if ans.prompt != prompt else msgspec.structs.replace(ans, prompt=None)
        if worker in first:
            more.setdefault(worker, []).append(ans)
        else:
            first[worker] = ans
    return Record(
        id=item_id,
        set=set_name,
        question=question,
        prompt=prompt,
        choices=reference.choices if isinstance(reference, TextReference) else None,
        gold=gold_of(reference),
        answers=first,
        domain=domain,
        reference=reference,
        more_answers=more,
    )


def merge(table: Table, new: Record) -> None:
    """Add ``new``'s answers to the table's record of the same question (first answers kept, extra ones
    appended), or add ``new``; a record of the same (set, id) with another question is a ``RecordError``."""
    old = table.get(new.key)
    if old is None:
        table[new.key] = new
        return
    if old.question != new.question:
        raise RecordError(
            f"{new.set}/{new.id}: the table holds a different question under this id; record into another file"
        )
    answers = dict(old.answers)
    more = {w: list(a) for w, a in old.more_answers.items()}
    for worker, ans in [*((w, a) for w, a in new.answers.items()), *_extra(new.more_answers)]:
        ans = _with_prompt(ans, new.prompt, old.prompt)
        if worker in answers:
            more.setdefault(worker, []).append(ans)
        else:
            answers[worker] = ans
    table[new.key] = msgspec.structs.replace(old, answers=answers, more_answers=more)


def _extra(more: Mapping[str, list[Answer]]) -> list[tuple[str, Answer]]:
    return [(w, a) for w, answers in more.items() for a in answers]


def _with_prompt(ans: Answer, own: str | None, table: str | None) -> Answer:
    """An answer moved into another record keeps its exact prompt: stated unless it is the record's."""
    prompt = ans.prompt if ans.prompt is not None else own
    return msgspec.structs.replace(ans, prompt=None if prompt == table else prompt)


def counts(table: Table) -> dict[tuple[str, str, str], int]:
    """(set, id, worker) -> how many answers the table holds."""
    found: dict[tuple[str, str, str], int] = {}
    for rec in table.values():
        for worker in rec.answers:
            found[(rec.set, rec.id, worker)] = 1 + len(rec.more_answers.get(worker, []))
    return found


def read_table(path: Path) -> Table:
    """A table's records by (set, id); none when the file does not exist; a corrupt file is a ``RecordError``
    naming it (and the line)."""
    table: Table = {}
    if not path.exists():
        return table
    try:
        with gzip.open(path, "rb") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    merge(table, _decode(line, path, n))
    except (OSError, EOFError, zlib.error) as exc:
        raise RecordError(f"{path}: not a readable gzip replay table ({exc})") from exc
    return table


def _decode(line: bytes, path: Path, n: int) -> Record:
    try:
        return _decoder.decode(line)
    except msgspec.ValidationError as exc:
        raise RecordError(f"{path}:{n}: not a replay record ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise RecordError(f"{path}:{n}: not JSON ({exc})") from exc


def write_table(path: Path, table: Table) -> None:
    """The whole table, atomically: a temporary file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with gzip.open(tmp, "wb") as fh:
            for rec in table.values():
                fh.write(_encoder.encode(rec) + b"\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecordError(f"cannot write {path}: {exc}") from exc


class Journal:
    """A recording run's answers as they finish (``TABLE.partial``), folded into the table by ``fold``."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self.path = table.with_name(table.name + ".partial")

    def check_writable(self) -> None:
        """Fail before any paid call when the table's folder cannot take the journal and the renamed table."""
        folder = self.table.parent
        if not folder.is_dir():
            raise RecordError(f"cannot write {self.table}: {folder} is not a directory")
        if not os.access(folder, os.W_OK | os.X_OK) or (
            self.table.exists() and not os.access(self.table, os.W_OK)
        ):
            raise RecordError(f"cannot write {self.table}: permission denied")

    def load(self) -> Table:
        """The table with the journal of an earlier run folded in (a cut-off last journal line dropped)."""
        table = read_table(self.table)
        if not self.path.exists():
            return table
        lines = self.path.read_bytes().split(b"\n")
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rec = _decoder.decode(line)
            except msgspec.DecodeError:
                if n == len(lines):  # the last line, no newline after it: a write cut off mid-line
                    continue
                raise RecordError(
                    f"{self.path}:{n}: not a replay record (delete the file to drop it)"
                ) from None
            merge(table, rec)
        return table

    def append(self, rec: Record) -> None:
        with self.path.open("ab") as fh:
            fh.write(_encoder.encode(rec) + b"\n")

    def fold(self) -> Table:
        """Table and journal into the table (atomically), then the journal removed; the folded table. A run folds
        an earlier run's journal before its first append, so nothing is ever appended after a cut-off line."""
        table = self.load()
        if not self.path.exists():
            return table
        write_table(self.table, table)
        self.path.unlink(missing_ok=True)
        return table


_append_lock = threading.Lock()


def append_member(path: Path, rec: Record) -> None:
    """One record as one gzip member, appended in a single write: several writers (processes too, through
    ``O_APPEND``) never interleave inside a member, and the file reads as one gzip stream."""
    data = gzip.compress(_encoder.encode(rec) + b"\n")
    with _append_lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


__all__ = [
    "Answer",
    "Journal",
    "Record",
    "RecordError",
    "Table",
    "answer",
    "append_member",
    "counts",
    "gold_of",
    "merge",
    "read_table",
    "record",
    "write_table",
]
