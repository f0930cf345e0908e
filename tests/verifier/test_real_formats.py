"""Benchmark records in their released formats (issue 20, item 5): MATH-500, LiveCodeBench, GPQA.

``tasks/fixtures/math500_real.jsonl.gz`` is MATH-500 (the 500 MATH test problems of "Let's Verify Step by Step",
openai/prm800k) as republished at MobileLLM/BudgetThinker, evaluation/data/math500/test_ori.jsonl, commit
f0466b9d37595f46603387baa5930e312fefb7f5 (problem, solution, answer, subject, level, unique_id); MATH is MIT-licensed.
Its real answer formats (``\\left( 3, \\frac{\\pi}{2} \\right)``, ``\\text{Evelyn}``, ``90^\\circ``, ``6 - 5i``, ``p - q``)
and solutions that say "the final answer is $5 + 4 + 2 = \\boxed{11}$" are what a verifier meets in the eval. Before
this test, three of the 500 reference solutions were judged wrong ("several different final answers").

``tasks/fixtures/livecodebench_real.jsonl``: record ``1873_A`` (Codeforces, stdin) is a released
``livecodebench/code_generation_lite`` record as committed in Kaggle/kaggle-benchmarks,
documentation/examples/code_generation.py, commit 0d759286b5dcb83878e27840fcb42b559062abf3 (that file: Apache-2.0;
LiveCodeBench's dataset card, as copied in public repositories, declares ``license: cc`` with no version): its
``private_test_cases`` blob is the released bytes. That file holds the
public tests as a list; they are stored here as the release stores them, a ``json.dumps`` string. No released
LeetCode (functional) record was found in a public repository, so ``90017`` and ``90018`` are our own problems in the
exact released encoding — ``base64(zlib.compress(pickle.dumps(json.dumps(tests), protocol=4)))``, which re-encodes
the real blob byte for byte (checked below) — with ``starter_code``, ``metadata.func_name`` and JSON argument lines
as LeetCode records have them.

``tasks/fixtures/gpqa_diamond_format.csv`` is our own content in the released ``gpqa_diamond.csv`` layout. The
GPQA authors ask that its questions not be posted in plain text, so none is copied; the layout is: the 78-column
header (as in the dataset card's features and in copies of the CSV in public repositories), pandas-style quoting,
cells with leading and trailing line breaks, ``Pre-Revision``/``Extra Revised`` versions that differ from the revised
question, ``Record ID`` values ``rec`` + 14 characters.
"""

from __future__ import annotations

import base64
import csv
import pickle
import re
import zlib
from pathlib import Path

import pytest

from schemas.verify import (
    FunctionalTestsReference,
    Outcome,
    StdioTestsReference,
    TextReference,
    VerifyRequest,
)
from services.verifier.core import Verifier
from tasks.datasets import load_gpqa, load_livecodebench, load_math500
from tasks.rows import read_rows

session_loop = pytest.mark.asyncio(loop_scope="session")

FIXTURES = Path(__file__).parents[2] / "tasks" / "fixtures"
MATH500 = FIXTURES / "math500_real.jsonl.gz"
LCB = FIXTURES / "livecodebench_real.jsonl"
GPQA = FIXTURES / "gpqa_diamond_format.csv"


def _plain(answer: str) -> str:
    return re.sub(r"^\s*[a-z]\s*=\s*", "", answer.replace(" ", ""))


@session_loop
async def test_every_math500_reference_solution_is_judged_correct_and_other_answers_are_not(
    verifier: Verifier,
) -> None:
    problems = load_math500(MATH500)  # the loader's own check: each answer is its solution's last box
    rows = list(read_rows(MATH500))
    assert len(problems) == 500
    gold = [
        VerifyRequest(id=p.id, response=row["solution"], reference=p.reference)
        for p, row in zip(problems, rows, strict=True)
    ]
    wrong = []
    for i, problem in enumerate(problems):
        j = (i + 1) % len(problems)  # the next record whose answer is a different one ("5" and "x=5" are not)
        while _plain(problems[j].reference.answer) == _plain(problem.reference.answer):
            j = (j + 1) % len(problems)
        other = problems[j].reference.answer
        wrong.append(
            VerifyRequest(
                id=f"wrong|{problem.id}",
                response=f"So the answer is $\\boxed{{{other}}}$.",
                reference=problem.reference,
            )
        )
    verdicts = await verifier.verify_batch(gold + wrong)
    missed = {v.id: v.reason for v in verdicts[:500] if v.outcome is not Outcome.CORRECT}
    assert not missed, missed
    accepted = {v.id: v.reason for v in verdicts[500:] if v.outcome is Outcome.CORRECT}
    assert not accepted, accepted


# ---- LiveCodeBench ----------------------------------------------------------------------------------------------
def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}```\n"


# record id -> (a correct solution, a wrong one). The wrong ones pass the public tests, so only the decoded private
# tests can catch them.
LCB_SOLUTIONS = {
    "1873_A": (
        "t = int(input())\nfor _ in range(t):\n    s = input().strip()\n"
        "    print('YES' if sum(a != b for a, b in zip(s, 'abc')) <= 2 else 'NO')\n",
        "print('YES\\nYES\\nYES\\nNO\\nNO\\nYES')\n",  # the public test's output, whatever the input
    ),
    "90017": (
        "class Solution:\n    def countGoodIndices(self, nums: List[int], k: int) -> int:\n"
        "        return sum(1 for i in range(0, len(nums), 2) if nums[i] % k == 0)\n",
        "class Solution:\n    def countGoodIndices(self, nums: List[int], k: int) -> int:\n"
        "        return sum(1 for x in nums[::2] if x % k == 0 and x > 1)\n",  # misses [1] with k = 1
    ),
    "90018": (
        "class Solution:\n    def isBalanced(self, num: str) -> bool:\n"
        "        return sum(map(int, num[::2])) == sum(map(int, num[1::2]))\n",
        "class Solution:\n    def isBalanced(self, num: str) -> bool:\n"
        "        return len(num) % 2 == 0 and sum(map(int, num[::2])) == sum(map(int, num[1::2]))\n",
    ),
}


def test_livecodebench_released_records_decode() -> None:
    rows = {row["question_id"]: row for row in read_rows(LCB)}
    real = rows["1873_A"]["private_test_cases"]
    # our own trusted fixture, read the plain way
    inner = pickle.loads(zlib.decompress(base64.b64decode(real)))
    assert type(inner) is str
    # the encoding the constructed records use is the release's: it gives back the real blob byte for byte
    assert base64.b64encode(zlib.compress(pickle.dumps(inner, protocol=4))).decode() == real
    for qid in ("90017", "90018"):
        assert rows[qid]["private_test_cases"].startswith("eJ")  # zlib's default header, as released

    problems = {p.id.removeprefix("livecodebench/"): p for p in load_livecodebench(LCB)}
    public = {p.id.removeprefix("livecodebench/"): p for p in load_livecodebench(LCB, public_only=True)}
    expected = {  # id -> (reference type, public tests, public + private tests, func_name)
        "1873_A": (StdioTestsReference, 1, 5, None),
        "90017": (FunctionalTestsReference, 2, 7, "countGoodIndices"),
        "90018": (FunctionalTestsReference, 2, 9, "isBalanced"),
    }
    assert set(problems) == set(expected)
    for qid, (kind, n_public, n_all, func_name) in expected.items():
        ref, public_ref = problems[qid].reference, public[qid].reference
        assert type(ref) is kind and type(public_ref) is kind
        assert (len(public_ref.tests), len(ref.tests)) == (n_public, n_all)  # type: ignore[union-attr]
        assert getattr(ref, "func_name", None) == func_name
    stdin = problems["1873_A"].reference
    assert stdin.tests[1].input == "1\nabc\n" and stdin.tests[1].output == "YES\n"  # type: ignore[union-attr]
    leetcode = problems["90018"]
    assert leetcode.reference.starter_code.startswith("class Solution:")  # type: ignore[union-attr]
    assert "Starter code:\nclass Solution:" in leetcode.question


@session_loop
async def test_livecodebench_released_records_judge_right_and_wrong_solutions(verifier: Verifier) -> None:
    problems = {p.id.removeprefix("livecodebench/"): p for p in load_livecodebench(LCB)}
    public = {p.id.removeprefix("livecodebench/"): p for p in load_livecodebench(LCB, public_only=True)}
    requests = [
        problems[qid].request(fenced(code), f"{kind}|{qid}")
        for qid, pair in LCB_SOLUTIONS.items()
        for kind, code in zip(("right", "wrong"), pair, strict=True)
    ] + [public[qid].request(fenced(wrong), f"public|{qid}") for qid, (_, wrong) in LCB_SOLUTIONS.items()]
    verdicts = {v.id: v for v in await verifier.verify_batch(requests)}
    for qid in LCB_SOLUTIONS:
        right, wrong, on_public = (verdicts[f"{kind}|{qid}"] for kind in ("right", "wrong", "public"))
        assert right.outcome is Outcome.CORRECT, (qid, right.reason)
        assert wrong.outcome is Outcome.INCORRECT, (qid, wrong.reason)
        assert on_public.outcome is Outcome.CORRECT, (qid, on_public.reason)


# ---- GPQA -------------------------------------------------------------------------------------------------------
def test_gpqa_released_layout_uses_the_revised_question_and_a_seeded_shuffle() -> None:
    with GPQA.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 6 and len(rows[0]) == 78
    problems = load_gpqa(GPQA, seed=0)
    assert problems == load_gpqa(GPQA, seed=0)
    assert [p.reference.choices for p in problems] != [p.reference.choices for p in load_gpqa(GPQA, seed=1)]
    for row, problem in zip(rows, problems, strict=True):
        ref = problem.reference
        assert isinstance(ref, TextReference) and ref.kind == "mcq" and ref.choices is not None
        assert re.fullmatch(r"rec\w{14}", row["Record ID"])
        assert problem.id == f"gpqa_diamond/{row['Record ID']}"
        gold = " ".join(row["Correct Answer"].split())
        assert ref.choices["ABCD".index(ref.answer)] == gold  # the gold letter points at the revised answer
        wrong = [" ".join(row[f"Incorrect Answer {i}"].split()) for i in (1, 2, 3)]
        assert sorted(ref.choices) == sorted([gold, *wrong])
        assert all(c == c.strip() and "\n" not in c and "  " not in c for c in ref.choices)
        assert f"{ref.answer}) {gold}\n" in problem.question + "\n"
    revised = problems[0]  # the revision changed the numbers and the answer
    assert "3 mol of CH4" in revised.question and "4 mol" not in (revised.reference.choices or [])
    extra = problems[4]  # an "Extra Revised" version exists and is not what the harnesses ask
    assert "neutral sodium" in extra.question and "Na+" not in extra.question
    paragraphs = problems[2].question
    assert "\n\nStep 1: the cells double three times.\n\nStep 2:" in paragraphs  # steps kept on their lines


@session_loop
async def test_gpqa_gold_letter_is_judged_correct_and_the_others_are_not(verifier: Verifier) -> None:
    problems = load_gpqa(GPQA, seed=0)
    requests = [
        p.request(f"Reasoning first.\n\nAnswer: {letter}", f"{letter}|{p.id}")
        for p in problems
        for letter in "ABCD"
    ]
    verdicts = await verifier.verify_batch(requests)
    golds = {p.id: p.reference.answer for p in problems}
    for v in verdicts:
        letter, pid = v.id.split("|", 1)
        assert (v.outcome is Outcome.CORRECT) == (letter == golds[pid]), (v.id, v.outcome, v.reason)
