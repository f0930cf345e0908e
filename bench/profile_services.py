"""Where each service's CPU goes under load: py-spy samples every `conductor serve <service>` process (issue 37).

The services run as real processes, one each, on a private nats-server, with zero-latency sim workers; client lanes
keep ``--in-flight`` 3-step solves (`refine:3`) outstanding while ``py-spy record`` samples each process for
``--seconds``. Printed per service: its CPU per solve, then the functions with the most samples on top of the stack
(self) and anywhere in it (inclusive), as shares of that process's samples. Raw collapsed stacks are written to
``--out`` (default runs/profile/) for a flame graph. Durable checkpoints are on unless ``--no-durable``.

Needs py-spy (`pip install py-spy`; not a project dependency) and permission to ptrace the children (root, or
``kernel.yama.ptrace_scope = 0``). A profiler, not a benchmark: its figures are shares, not targets.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._harness import NatsServer, Processes, cpu_s, tempdir, zero_latency_pool
from bench.throughput_bench import serve_each, solve_many


def collapse(path: Path, top: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]], int]:
    """(self shares, inclusive shares, samples) from py-spy's raw output: one ``frame;frame;... count`` a line."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():  # a sample torn by --nonblocking (a frame read mid-change)
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    share = max(total, 1)
    return (
        [(f, n / share) for f, n in own.most_common(top)],
        [(f, n / share) for f, n in inclusive.most_common(top)],
        total,
    )


def _short(frame: str) -> str:
    """``fn (path/to/module.py:123)`` -> ``fn (module.py)``: lines merged, so one function is one entry."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(file).parts
    return f"{name} ({'/'.join(parts[-2:])})"


def _spy(spy: str, pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    cmd = [spy, "record", "-p", str(pid), "-d", str(seconds), "-r", "250", "-f", "raw", "-o", str(out)]
    return subprocess.Popen([*cmd, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def main(args: argparse.Namespace, spy: str, out: Path) -> None:
    tmp = tempdir()
    with NatsServer() as server:
        procs = Processes()
        try:
            env = {
                "NATS_URL": server.url,
                "CONDUCTOR_POOL": str(zero_latency_pool(tmp)),
                "CONDUCTOR_DURABLE": "0" if args.no_durable else "1",
            }
            served = serve_each(procs, env)
            await solve_many(server.url, 300, 64, 60)  # warm-up
            spies = {name: _spy(spy, p.pid, args.seconds, out / f"{name}.txt") for name, p in served.items()}
            cpu0 = {name: cpu_s(p.pid) for name, p in served.items()}
            solved = 0
            loop = asyncio.get_running_loop()
            stop_at = loop.time() + args.seconds
            while loop.time() < stop_at:
                await solve_many(server.url, 1000, args.in_flight, 120)
                solved += 1000
            cpu1 = {name: cpu_s(p.pid) for name, p in served.items()}
            for s in spies.values():
                s.wait(timeout=args.seconds + 60)
        finally:
            procs.stop()
    print(f"{solved} solves, {args.in_flight} in flight, durable={not args.no_durable}")
    for name in served:
        own, inclusive, samples = collapse(out / f"{name}.txt", args.top)
        print(
            f"\n== {name}: {(cpu1[name] - cpu0[name]) * 1e3 / solved:.3f} ms CPU per solve, {samples} samples"
        )
        print("  self:")
        for f, s in own:
            print(f"    {s:6.1%}  {f}")
        print("  inclusive:")
        for f, s in inclusive:
            print(f"    {s:6.1%}  {f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--out", default="runs/profile")
    parser.add_argument("--no-durable", action="store_true")
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    asyncio.run(main(args, spy, Path(args.out)))
