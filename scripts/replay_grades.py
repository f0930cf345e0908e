"""Grade every recorded answer of the shipped replay tables twice — with the project's verifier and with ZeroEval's own
rule — and write docs/replay-grades.md: accuracy per set and model under our grading, and every disagreement.

    python -m scripts.replay_grades [--out docs/replay-grades.md] [--workers 2]

ZeroEval's rule is re-implemented from ../shared/replay/README.md ("How ZeroEval graded") and ZeroEval's
``src/evaluation/{math,crux}_eval.py``: the answer is the ``answer`` field of the first complete JSON object
(newlines removed before parsing), else a regex on ``"answer":``, else (Llama-3.1 models only) a ``\\boxed{}`` in
the last 30 characters; math-l5 and gsm compare the first number of the answer and of the gold after removing ``$``
and ``,`` (an answer with ``/`` is evaluated as arithmetic when it can be); crux compares the answer's text with the
gold's, surrounding quotes stripped and double quotes read as single ones (this reproduces the README's crux figures
within about a point, math-l5, gsm and MMLU-Redux exactly); MMLU-Redux compares the letter.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import operator
import re
from collections import Counter, defaultdict
from fractions import Fraction
from pathlib import Path

import msgspec

from schemas.verify import Outcome, Verdict
from services.verifier.config import Settings
from services.verifier.core import Verifier
from tasks import replay

OUT = Path(__file__).resolve().parent.parent / "docs" / "replay-grades.md"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_EXTRACTORS = (  # ZeroEval's fallbacks in order: a quoted value, one with broken quotes, an unquoted one (or key)
    re.compile(r'"answer"\s*:\s*"([^"]*?)"'),
    re.compile(r'"answer"\s*:\s*"(.*?)"', re.DOTALL),
    re.compile(r'"answer"\s*:\s*([^,\s]*)'),
    re.compile(r"answer\s*:\s*([^,\s]*)"),
)
_BOXED = re.compile(r"\\boxed{([\w\d]+)}")
_ARITHMETIC = re.compile(r"[\d\s+\-*/().]+")


class Row(msgspec.Struct, frozen=True, kw_only=True):
    set: str
    id: str
    model: str
    ours: bool
    ours_extracted: str | None
    zeroeval: bool
    zeroeval_extracted: str | None
    gold: str


def first_json(text: str) -> dict | None:
    """ZeroEval's ``extract_first_complete_json``: the first balanced ``{...}``, parsed with newlines removed."""
    depth, start = 0, None
    for i, ch in enumerate(text):
        if ch == "{":
            start = i if depth == 0 else start
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                try:
                    value = json.loads(text[start : i + 1].replace("\n", ""))
                except json.JSONDecodeError:
                    return None
                return value if isinstance(value, dict) else None
    return None


def zeroeval_answer(model: str, text: str) -> object:
    """The ``answer`` value ZeroEval reads (any JSON type), or None when it finds none."""
    found = first_json(text)
    if found is not None and "answer" in found:
        return found["answer"]
    for pattern in _EXTRACTORS:
        m = pattern.search(text)
        if m:
            return m.group(1)
    if "Llama-3.1" in model and "boxed" in text[-30:]:
        boxed = _BOXED.search(text)
        return boxed.group(1) if boxed else None
    return None


def _crux_text(answer: object) -> str:
    """The text ZeroEval's crux rule compares: surrounding quotes stripped, double quotes read as single ones."""
    return str(answer).strip().strip("'\"").replace('"', "'")


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
MAX_EXPONENT = 64
"""A recorded answer is text a model wrote: ``9**9**9`` must not hang the grading (ZeroEval ``eval``s it)."""


def _arithmetic(node: ast.expr) -> Fraction:
    """The value of digits and + - * / ** ( ) as ZeroEval's ``eval`` computes it, exactly, without ``eval``."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    ):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _arithmetic(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > MAX_EXPONENT):
            raise ValueError("exponent out of range")
        return _OPS[type(node.op)](left, right)
    raise ValueError("not arithmetic")


def _sanitise(answer: str) -> str:
    answer = answer.replace("$", "").replace(",", "").strip()
    if "/" in answer and _ARITHMETIC.fullmatch(answer):
        try:
            return str(float(_arithmetic(ast.parse(answer, mode="eval").body)))
        except (ArithmeticError, SyntaxError, TypeError, ValueError):
            return answer
    return answer


def zeroeval_correct(set_name: str, model: str, text: str, gold: str) -> tuple[bool, str | None]:
    if set_name == "mmlu-redux":
        return text.strip() == "ABCD"[int(gold)], text.strip() or None
    found = zeroeval_answer(model, text)
    if set_name == "crux":
        if found is None:
            return False, None
        return _crux_text(found) == _crux_text(gold), str(found)
    if found is None or found == "":
        return False, None
    answer = str(found)
    mine, theirs = _NUMBER.search(_sanitise(answer)), _NUMBER.search(gold.replace("#", "").replace(",", ""))
    if mine and theirs:
        return float(mine.group()) == float(theirs.group()), answer
    return _sanitise(answer) == gold.replace("#", "").strip(), answer


async def grade_all(workers: int) -> list[Row]:
    index = replay.load_index("")
    records = [r for r in index.records if r.error_type in ("", "ok")]
    settings = Settings.from_env(
        {"CONDUCTOR_VERIFIER_WORKERS": str(workers), "CONDUCTOR_SANDBOX_WORKERS": "1"}
    )
    problems = {r.key: replay.problem(r, f"replay-{r.set}") for r in records}
    jobs = [(r, model) for r in records for model in sorted(r.answers)]
    requests = [problems[r.key].request(r.answers[m].text, f"{r.set}:{r.id}:{m}") for r, m in jobs]
    async with Verifier(settings) as verifier:
        verdicts: list[Verdict] = []
        for start in range(0, len(requests), 256):
            verdicts += await verifier.verify_batch(requests[start : start + 256])
    rows = []
    for (r, model), verdict in zip(jobs, verdicts, strict=True):
        if verdict.outcome == Outcome.ERROR:
            raise SystemExit(f"verifier error on {verdict.id}: {verdict.reason}")
        ok, extracted = zeroeval_correct(r.set, model, r.answers[model].text, str(r.gold))
        rows.append(
            Row(
                set=r.set,
                id=r.id,
                model=model,
                ours=verdict.outcome == Outcome.CORRECT,
                ours_extracted=verdict.extracted,
                zeroeval=ok,
                zeroeval_extracted=extracted,
                gold=str(r.gold),
            )
        )
    return rows


def _cell(text: str | None) -> str:
    if text is None:
        return "—"
    flat = " ".join(text.split())
    flat = flat if len(flat) <= 60 else flat[:57] + "..."
    return "`" + flat.replace("|", "\\|").replace("`", "'") + "`"


def report(rows: list[Row]) -> str:
    by: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in rows:
        by[(row.set, row.model)].append(row)
    out = [
        "# Replay tables: our grades against ZeroEval's",
        "",
        "Generated by `python -m scripts.replay_grades` from the shipped tables (tasks/data/replay; MMLU-Redux: the "
        "`ok` questions). *Ours*: the project's verifier (math equivalence for math-l5 and gsm, evaluated literals "
        "for crux, the stated letter for MMLU-Redux) on each registry question's reference. *ZeroEval*: its own rule, "
        "re-implemented (scripts/replay_grades.py). Accuracy in %, over every record of the public part.",
        "",
    ]
    for set_name in replay.SETS:
        models = sorted(
            {m for s, m in by if s == set_name}, key=lambda m: -sum(r.ours for r in by[(set_name, m)])
        )
        out += [
            f"## {set_name}",
            "",
            "| model | n | ours % | ZeroEval % | ours only right | ZeroEval only right |",
        ]
        out.append("|---|---:|---:|---:|---:|---:|")
        for m in models:
            rs = by[(set_name, m)]
            n = len(rs)
            ours, theirs = sum(r.ours for r in rs), sum(r.zeroeval for r in rs)
            only_ours = sum(r.ours and not r.zeroeval for r in rs)
            only_theirs = sum(r.zeroeval and not r.ours for r in rs)
            out.append(
                f"| {m} | {n} | {100 * ours / n:.1f} | {100 * theirs / n:.1f} | {only_ours} | {only_theirs} |"
            )
        out.append("")
    differ = [r for r in rows if r.ours != r.zeroeval]
    counts = Counter(r.set for r in differ)
    out += [
        "## Every disagreement",
        "",
        "Per set: " + ", ".join(f"{s} {counts.get(s, 0)}" for s in replay.SETS) + f"; {len(differ)} in all.",
        "",
        "| set | id | model | gold | ours | extracted (ours) | ZeroEval | extracted (ZeroEval) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(differ, key=lambda r: (replay.SETS.index(r.set), r.id, r.model)):
        out.append(
            f"| {r.set} | {r.id} | {r.model} | {_cell(r.gold)} | {'right' if r.ours else 'wrong'} | "
            f"{_cell(r.ours_extracted)} | {'right' if r.zeroeval else 'wrong'} | {_cell(r.zeroeval_extracted)} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--workers", type=int, default=2, help="math-equivalence processes")
    args = parser.parse_args()
    rows = asyncio.run(grade_all(args.workers))
    args.out.write_text(report(rows), encoding="utf-8")
    print(f"{args.out}: {len(rows)} answers, {sum(r.ours != r.zeroeval for r in rows)} disagreements")


if __name__ == "__main__":
    main()
