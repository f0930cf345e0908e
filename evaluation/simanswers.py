"""What the sim workers know about the fixture benchmarks, and the pool an eval run uses when none is given.

Sim workers answer only questions in their dataset (services/worker_adapter/providers/sim.py). So that every
benchmark fixture runs offline *and measures something*, ``tasks/fixtures/sim_answers.jsonl`` holds, for each
fixture question (as sent, format instruction included), a correct answer and wrong ones in the worker-dataset
shape: the reference answer or another option letter for text, and for code a correct program (HumanEval's and
BigCodeBench's canonical solutions, small hand-written ones for the LiveCodeBench fixture) and a mutant that the
real verifier fails. Regenerate after changing a fixture: ``python -m evaluation.simanswers``.

``run_pool`` writes, for one run, the sim pool's workers (tasks/data/sim_pool.toml: same skills and prices)
over exactly the run's questions, so ``sim`` and fixture benchmarks can share one eval; its workers draw afresh
per task (``vary_by_task``), so repeats differ as a real pool's would and the standard error is not a constant 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from conductor.answer_format import family_of
from conductor.pool import parse_pool
from evaluation.mutants import PERTURB, mutate_completion
from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    Reference,
    StdioTestsReference,
    TextReference,
    UnittestReference,
)
from tasks import sim
from tasks.problem import Problem
from tasks.registry import REGISTRY, fixture_dir, load_benchmark, sim_benchmarks
from tasks.rows import read_rows
from tasks.sim.family import WorkerRecord

ANSWERS_FILE = "sim_answers.jsonl"

LCB_SOLUTIONS = {
    "livecodebench/abc900_a": "n = int(input())\nprint(sum(map(int, input().split())))",
    "livecodebench/abc900_b": "n = int(input())\na = list(map(int, input().split()))\nprint(sum(a) / n)",
    "livecodebench/9001": (
        "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n                return [seen[target - x], i]\n            seen[x] = i"
    ),
    "livecodebench/9002": "class Solution:\n    def isEven(self, n):\n        return n % 2 == 0",
    "livecodebench/9003": "class Solution:\n    def half(self, n):\n        return n / 2",
}
"""Correct programs for the LiveCodeBench fixture (its published format carries no solution)."""

_STDIN_MUTANT = """import contextlib, io
__out = io.StringIO()
with contextlib.redirect_stdout(__out):
    exec(compile({source!r}, "<solution>", "exec"), {{"__name__": "__main__"}})
print(__out.getvalue().rstrip() + "1")
"""


def _wrong_text(answer: str, domain: str, choices: list[str] | None) -> list[str]:
    if family_of(domain) == "mcq":
        letters = "ABCDEFGHIJ"[: len(choices or "ABCD")]
        return [x for x in letters if x != answer.strip().upper()][:3]
    if re.fullmatch(r"-?\d+", answer.strip()):
        n = int(answer)
        return [str(n + 1), str(n - 1), str(2 * n + 3)]
    return [w for w in ("0", "1", "-1") if w != answer.strip()][:3]


def _method_mutant(program: str, func: str) -> str:
    return (
        f"{program.rstrip()}\n{PERTURB}\n\n__original = Solution.{func}\n\n\n"
        f"def __wrapped(self, *args, **kwargs):\n    return __perturb(__original(self, *args, **kwargs))\n\n\n"
        f"Solution.{func} = __wrapped\n"
    )


def _canonical(benchmark: str) -> dict[str, str]:
    """task id -> canonical completion, from the published rows (HumanEval's package, BigCodeBench's fixture)."""
    if benchmark == "humaneval":
        from tasks.datasets import humaneval_canonical

        return humaneval_canonical()
    rows = read_rows(fixture_dir() / (REGISTRY[benchmark].fixture or ""))
    return {str(r["task_id"]): str(r["canonical_solution"]) for r in rows}


def _code(problem: Problem, ref: Reference, canonical: dict[str, str]) -> tuple[str, list[str]] | None:
    match ref:
        case HumanEvalReference(prompt=prompt, entry_point=entry):
            program = prompt + canonical[problem.id]
            return program, [mutate_completion(program, entry)]
        case UnittestReference(code_prompt=_, entry_point=entry):
            program = _complete_prompt(problem) + canonical[problem.id]
            return program, [mutate_completion(program, entry)]
        case StdioTestsReference() if problem.id in LCB_SOLUTIONS:
            program = LCB_SOLUTIONS[problem.id]
            return program, [_STDIN_MUTANT.format(source=program)]
        case FunctionalTestsReference(func_name=func) if problem.id in LCB_SOLUTIONS:
            program = LCB_SOLUTIONS[problem.id]
            return program, [_method_mutant(program, func)]
    return None


def _complete_prompt(problem: Problem) -> str:
    """The code prompt inside the formatted question's fence (BigCodeBench's complete_prompt)."""
    return problem.question.split("```python\n", 1)[1].rsplit("\n```", 1)[0] + "\n"


def record(problem: Problem, canonical: dict[str, str]) -> WorkerRecord | None:
    """The sim workers' record for one fixture problem; None when no correct answer is known."""
    ref = problem.reference
    domain = family_of(problem.domain) or "general"
    if isinstance(ref, TextReference):
        answer, wrong = ref.answer, _wrong_text(ref.answer, problem.domain, ref.choices)
    else:
        found = _code(problem, ref, canonical)
        if found is None:
            return None
        answer, wrong = found
    return WorkerRecord(id=problem.id, domain=domain, question=problem.question, answer=answer, wrong=wrong)


def fixture_records() -> list[WorkerRecord]:
    records = []
    for name in sim_benchmarks():
        canonical = _canonical(name) if name in {"humaneval", "bigcodebench-hard"} else {}
        records.extend(r for p in load_benchmark(name) if (r := record(p, canonical)) is not None)
    return records


def answers_bytes(records: Iterable[WorkerRecord]) -> bytes:
    encoder = msgspec.json.Encoder()
    return b"".join(encoder.encode(r) + b"\n" for r in records)


def answers_path() -> Path:
    return fixture_dir() / ANSWERS_FILE


def _known(path: Path) -> dict[str, bytes]:
    """question -> its record line, for a worker dataset file."""
    decoder = msgspec.json.Decoder(WorkerRecord)
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    return {decoder.decode(line).question: line for line in lines}


def run_pool(out_dir: Path, problems: Iterable[Problem]) -> Path:
    """``out_dir/pool.toml``: the sim pool's workers over ``out_dir/answers.jsonl`` (the run's questions only)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    known = {**_known(sim.dataset_path()), **_known(answers_path())}
    lines = [known[p.question] for p in problems if p.question in known]
    (out_dir / "answers.jsonl").write_bytes(b"".join(line + b"\n" for line in dict.fromkeys(lines)))
    text = sim.pool_path().read_text(encoding="utf-8")
    # Each repeat is a fresh draw (vary_by_task), as a real model's answers differ between runs.
    text = re.sub(r'(?m)^dataset\s*=\s*"[^"]*"\s*$', 'dataset = "answers.jsonl"\nvary_by_task = true', text)
    path = out_dir / "pool.toml"
    path.write_text(text, encoding="utf-8")
    parse_pool(text, base_dir=str(out_dir))  # the rewrite left a valid pool
    return path


if __name__ == "__main__":
    answers_path().write_bytes(answers_bytes(fixture_records()))
    print(f"wrote {answers_path()}")
