"""Verdict cases in each benchmark's published record format: ≥100 responses with the outcome a careful grader gives."""

from __future__ import annotations

import json
from functools import cache

import pytest

from schemas.verify import Outcome, TextReference
from services.verifier.core import Verifier
from tasks import datasets
from tasks.problem import Problem
from tests.verifier.conftest import FIXTURES

LOADERS = {
    "math500.jsonl": datasets.load_math500,
    "aime25.jsonl": datasets.load_aime,
    "aime25_problem_idx.jsonl": datasets.load_aime,
    "gpqa_diamond.csv": datasets.load_gpqa,
    "mmlu.jsonl": datasets.load_mmlu,
    "mmlu.csv": datasets.load_mmlu,
    "livecodebench.jsonl": datasets.load_livecodebench,
    "bigcodebench.jsonl": datasets.load_bigcodebench,
}
CASES = [json.loads(line) for line in (FIXTURES / "cases.jsonl").read_text().splitlines() if line.strip()]


@cache
def problems(file: str) -> dict[str, Problem]:
    loaded = datasets.load_humaneval() if file == "humaneval" else LOADERS[file](FIXTURES / file)
    return {p.id: p for p in loaded}


def fill_letters(response: str, problem: Problem) -> str:
    """GPQA letters depend on the seeded shuffle; cases name them as {gold}/{wrong}."""
    ref = problem.reference
    if not isinstance(ref, TextReference) or "{" not in response or ref.kind != "mcq":
        return response
    wrong = next(letter for letter in "ABCD" if letter != ref.answer)
    return (
        response.replace("{gold_lower}", ref.answer.lower())
        .replace("{gold}", ref.answer)
        .replace("{wrong}", wrong)
    )


def test_there_are_enough_cases_across_families() -> None:
    families = {c["file"] for c in CASES}
    assert len(CASES) >= 100
    assert {
        "math500.jsonl",
        "aime25.jsonl",
        "gpqa_diamond.csv",
        "mmlu.jsonl",
        "livecodebench.jsonl",
        "bigcodebench.jsonl",
        "humaneval",
    } <= families


@pytest.mark.asyncio(loop_scope="session")
async def test_verdict_cases(verifier: Verifier) -> None:
    """All cases in one batch (so they spread over the workers); each mismatch is reported with its note."""
    requests = []
    for n, case in enumerate(CASES):
        problem = problems(case["file"])[case["id"]]
        requests.append(problem.request(fill_letters(case["response"], problem), request_id=str(n)))
    verdicts = await verifier.verify_batch(requests)
    wrong = [
        f"{c['file']} {c['id']} [{c['note']}]: expected {c['expect']}, got {v.outcome} ({v.reason})"
        for c, v in zip(CASES, verdicts, strict=True)
        if v.outcome != Outcome(c["expect"])
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("outcome", ["correct", "incorrect"])
def test_each_family_has_both_outcomes(outcome: str) -> None:
    for family in {c["file"].split(".")[0].split("_")[0] for c in CASES}:
        assert any(c["expect"] == outcome and c["file"].startswith(family) for c in CASES), family
