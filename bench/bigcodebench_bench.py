"""BigCodeBench through the verifier vs BigCodeBench's own way (printed, not asserted; issue 20's figures).

Every record of the sample is run three ways per program (canonical solution, a ``return None`` mutant, a perturbed
mutant): BigCodeBench's way (one module, ``unittest``, no sandbox, one child process each, sequential) and through
our ``Verifier`` with the sandbox on (its warm sandboxes, all items in one batch). Printed: the agreement table the
issue's targets are stated in, items per second both ways and their ratio, peak resident memory per item (the
reference child's), the slowest and heaviest records, and every disagreement with its reason. The last line of
output is one JSON object.

    .venv/bin/python bench/bigcodebench_bench.py [--limit N] [--data PATH] [--only canonical] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evaluation.bigcodebench import (
    SAMPLE,
    ReferenceRun,
    load_records,
    none_mutant,
    perturbed_mutant,
    run_reference,
    solution,
)
from schemas.verify import Outcome, VerifyRequest
from services.verifier.config import Settings
from services.verifier.core import Verifier
from tasks.datasets import bigcodebench_reference

KINDS = ("canonical", "none", "perturbed")


def programs(record: dict, only: set[str]) -> list[tuple[str, str]]:
    program = solution(record)
    entry = str(record.get("entry_point") or "task_func")
    made = {
        "canonical": program,
        "none": none_mutant(program, entry),
        "perturbed": perturbed_mutant(program, entry),
    }
    return [(kind, made[kind]) for kind in KINDS if kind in only]


async def through_verifier(items: list[tuple[str, str, dict, str]]) -> tuple[dict, float]:
    settings = Settings.from_env()
    async with Verifier(settings) as verifier:
        print(f"sandbox: {verifier.sandbox.layers.describe()}", file=sys.stderr)
        requests = [
            VerifyRequest(
                id=f"{tid}|{kind}", response=f"```python\n{prog}\n```", reference=bigcodebench_reference(rec)
            )
            for tid, kind, rec, prog in items
        ]
        start = time.perf_counter()
        verdicts = {}
        async for verdict in verifier.stream(requests, requester="bench"):
            verdicts[verdict.id] = verdict
        return verdicts, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(SAMPLE))
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--ids", help="only these task ids (comma-separated numbers or full ids)")
    parser.add_argument("--only", default=",".join(KINDS))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="reference children at once (1: BigCodeBench's sequential way, the timing baseline)",
    )
    parser.add_argument("--out", help="write every row (reference and verdict) as JSON lines here")
    parser.add_argument(
        "--reference-cache",
        help="reuse the BigCodeBench-way results of an earlier --out file (they do not depend on the verifier);"
        " items/s of the reference then comes from the cached timings",
    )
    args = parser.parse_args()
    records = load_records(args.data)
    if args.ids:
        wanted = {i if "/" in i else f"BigCodeBench/{i}" for i in args.ids.split(",")}
        records = [r for r in records if r["task_id"] in wanted]
    if args.limit:
        records = records[: args.limit]
    only = set(args.only.split(","))
    items = [(str(r["task_id"]), kind, r, prog) for r in records for kind, prog in programs(r, only)]

    cached = {}
    if args.reference_cache and Path(args.reference_cache).exists():
        for line in Path(args.reference_cache).read_text().splitlines():
            row = json.loads(line)
            cached[f"{row['task_id']}|{row['kind']}"] = ReferenceRun(
                row["reference_passed"],
                row["reference_problem"],
                row["reference_seconds"],
                row["peak_rss_mb"],
            )
    reference = {
        f"{tid}|{kind}": cached[f"{tid}|{kind}"] for tid, kind, _, _ in items if f"{tid}|{kind}" in cached
    }
    todo = [(tid, kind, rec, prog) for tid, kind, rec, prog in items if f"{tid}|{kind}" not in reference]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        runs = pool.map(lambda item: run_reference(item[3], str(item[2]["test"]), args.timeout), todo)
        for n, ((tid, kind, _, _), run) in enumerate(zip(todo, runs, strict=True), 1):
            reference[f"{tid}|{kind}"] = run
            if n % 50 == 0:
                print(f"reference: {n}/{len(todo)}", file=sys.stderr)
    ref_seconds = sum(r.seconds for r in reference.values())
    verdicts, ver_seconds = asyncio.run(through_verifier(items))

    table: Counter = Counter()
    disagreements = []
    rows = []
    for tid, kind, _rec, _prog in items:
        key = f"{tid}|{kind}"
        ref, verdict = reference[key], verdicts[key]
        by_test = verdict.outcome is Outcome.INCORRECT and not _load_failure(verdict.reason)
        table[(kind, ref.passed, verdict.outcome.value, by_test)] += 1
        ok = (verdict.outcome is Outcome.CORRECT) if ref.passed else (verdict.outcome is not Outcome.CORRECT)
        row = {
            "task_id": tid,
            "kind": kind,
            "reference_passed": ref.passed,
            "reference_problem": ref.problem,
            "reference_seconds": round(ref.seconds, 2),
            "peak_rss_mb": round(ref.peak_rss_mb, 1),
            "outcome": verdict.outcome.value,
            "reason": verdict.reason,
        }
        rows.append(row)
        if not ok or (not ref.passed and verdict.outcome is Outcome.INCORRECT and not by_test):
            disagreements.append(row)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))

    print(f"{len(records)} records, {len(items)} programs")
    for kind in KINDS:
        if kind not in only:
            continue
        passing = sum(v for (k, p, _, _), v in table.items() if k == kind and p)
        correct = table[(kind, True, "correct", False)]
        failing = sum(v for (k, p, _, _), v in table.items() if k == kind and not p)
        by_test = table[(kind, False, "incorrect", True)]
        wrong_ok = table[(kind, False, "correct", False)]
        print(
            f"{kind:>10}: pass BigCodeBench's way {passing}; of those judged correct {correct}"
            f" ({100 * correct / max(1, passing):.1f}%) | fail BigCodeBench's way {failing}; judged incorrect by a"
            f" failing test {by_test}, judged correct {wrong_ok}"
        )
    outcomes = Counter((k, o) for (k, _, o, _), v in table.items() for _ in range(v))
    print("outcomes:", dict(sorted((f"{k}/{o}", v) for (k, o), v in outcomes.items())))
    ref_rate = len(items) / ref_seconds
    ver_rate = len(items) / ver_seconds
    print(
        f"items/s: BigCodeBench's way (sequential, no sandbox) {ref_rate:.2f}; verifier (sandbox on) {ver_rate:.2f};"
        f" ratio {ver_rate / ref_rate:.2f}x"
    )
    peaks = sorted(
        ((reference[f"{t}|{k}"].peak_rss_mb, t) for t, k, _, _ in items if k == "canonical"), reverse=True
    )
    print("peak RSS (MiB) of the heaviest canonical solutions:", [(t, round(m)) for m, t in peaks[:5]])
    for row in disagreements[:40]:
        print("DISAGREE", json.dumps(row)[:400])
    summary = {
        "records": len(records),
        "programs": len(items),
        "table": {
            f"{k}|{'pass' if p else 'fail'}|{o}|{'by_test' if b else '-'}": v
            for (k, p, o, b), v in table.items()
        },
        "disagreements": len(disagreements),
        "reference_items_per_s": round(ref_rate, 3),
        "verifier_items_per_s": round(ver_rate, 3),
        "ratio": round(ver_rate / ref_rate, 3),
        "max_peak_rss_mb": round(peaks[0][0], 1) if peaks else None,
    }
    print(json.dumps(summary))
    return 0


def _load_failure(reason: str | None) -> bool:
    text = reason or ""
    return "failed to load" in text or "MemoryError" in text or "tampering" in text or "<load>" in text


if __name__ == "__main__":
    raise SystemExit(main())
