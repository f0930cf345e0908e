"""Run a benchmark several times and print the median of every figure, with the load average beside each run.

    python bench/repeat.py bench/step_overhead_bench.py --runs 3 [-- ARGS for the bench]

Each run is a fresh process (its own nats-server and services); the bench's last printed line is its JSON object
(bench/_harness.py ``report``). Printed: every numeric figure's value per run and their median, the 1-minute load
average read just before each run, and, as the last line, one JSON object of the medians (plus ``runs`` and
``load_1m`` per run). Issue 37 reports the median of three runs on a quiet machine: a run whose load average
before it exceeds ``--quiet-load`` is still counted but flagged, so a figure taken beside other work says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def one_run(bench: str, args: list[str]) -> dict[str, object]:
    done = subprocess.run([sys.executable, bench, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{bench} exited with {done.returncode}:\n{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{bench} printed nothing")
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise SystemExit(f"{bench}'s last line is not its JSON object: {lines[-1][:200]!r}") from exc


def medians(runs: list[dict[str, object]]) -> dict[str, object]:
    """The median of each key whose value is a number in every run; other keys as the first run has them."""
    out: dict[str, object] = {}
    for key, first in runs[0].items():
        values = [r.get(key) for r in runs]
        numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
        out[key] = round(statistics.median(numbers), 4) if len(numbers) == len(runs) else first
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quiet-load", type=float, default=1.0)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])  # what follows "--" is the bench's own
    rest = argv[cut + 1 :]
    if not Path(args.bench).is_file():
        raise SystemExit(f"no benchmark file {args.bench}")
    runs, loads = [], []
    for i in range(args.runs):
        load = os.getloadavg()[0]
        loads.append(round(load, 2))
        flag = "" if load <= args.quiet_load else f"  (not quiet: load above {args.quiet_load})"
        print(f"run {i + 1}/{args.runs}: load average {load:.2f}{flag}", flush=True)
        runs.append(one_run(args.bench, rest))
    med = medians(runs)
    for key, value in med.items():
        per_run = [r.get(key) for r in runs]
        if isinstance(value, float | int) and not isinstance(value, bool):
            print(f"{key}: median {value}  runs {per_run}")
    print(json.dumps({**med, "runs": args.runs, "load_1m": loads}))


if __name__ == "__main__":
    main()
