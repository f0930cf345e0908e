"""Executor memory per task in flight (issue 37): its RSS idle after a warm-up, then with N tasks in flight.

The services run as real processes on a private nats-server, as in bench/throughput_bench.py's wide run: 1-second
sim workers, 3-step sequential solves (`refine:3`), no durable store. For each N the executor starts afresh, serves
a warm-up, settles, and its RSS is read (idle); then N client lanes each keep one task in flight for ``--hold``
seconds while its RSS is sampled every 0.1 s (loaded: the largest sample). Printed per N, the baseline beside the
figure: idle RSS, loaded RSS, ``(loaded - idle) / N`` (the bytes one more task in flight costs), and the issue's
figure ``peak RSS / N`` (VmHWM, idle memory included).

``--trace`` runs the executor under tracemalloc (slower; its RSS figures then include tracemalloc's own) and prints,
per N, the allocation sites whose live memory grew most from idle to loaded, grouped by traceback: what each task in
flight holds. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nats

from bench._harness import NatsServer, Processes, report, rss_mib, tempdir, zero_latency_pool

# The executor's program under ``--trace``: ``conductor serve`` with a SIGUSR2 handler that dumps a tracemalloc
# snapshot to the path in CONDUCTOR_BENCH_SNAPSHOT (the bench renames it before the next signal).
LAUNCHER = """
import gc, signal, sys, os, tracemalloc
def dump(*_):
    tracemalloc.take_snapshot().dump(os.environ["CONDUCTOR_BENCH_SNAPSHOT"])
def garbage(*_):
    from collections import Counter
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    kinds = Counter(getattr(o, "__qualname__", None) if type(o).__name__ in ("coroutine", "function", "frame")
                    else None for o in gc.garbage)
    names = Counter(type(o).__qualname__ for o in gc.garbage)
    with open(os.environ["CONDUCTOR_BENCH_SNAPSHOT"] + ".txt", "w") as f:
        f.write(f"{len(gc.garbage)} objects in cycles\\n")
        for name, n in names.most_common(40):
            f.write(f"{n:8d} {name}\\n")
        for name, n in kinds.most_common(40):
            f.write(f"{n:8d} code {name}\\n")
    gc.garbage.clear()
    gc.set_debug(0)
signal.signal(signal.SIGUSR2, dump if tracemalloc.is_tracing() else garbage)
from conductor.app.cli import main
sys.exit(main(sys.argv[1:]))
"""

BODY = json.dumps({"question": "What is the capital city of Australia?", "policy": "refine:3"}).encode()


async def hold(url: str, in_flight: int, *, seconds: float, ramp_s: float, pid: int) -> tuple[float, int]:
    """``in_flight`` lanes, each one solve at a time, for ``seconds`` (lanes started over ``ramp_s``); returns the
    largest RSS sampled (MiB) and the solves answered."""
    nc = await nats.connect(url, pending_size=512 * 1024 * 1024)
    stop_at = time.monotonic() + seconds
    solved = 0

    async def lane() -> None:
        nonlocal solved
        while time.monotonic() < stop_at:
            await nc.request("conductor.solve.client", BODY, timeout=600)
            solved += 1

    lanes = []
    peak = 0.0
    for i in range(in_flight):
        lanes.append(asyncio.create_task(lane()))
        if i % 50 == 49:
            await asyncio.sleep(ramp_s * 50 / in_flight)
    while time.monotonic() < stop_at:
        peak = max(peak, rss_mib(pid))
        await asyncio.sleep(0.1)
    await asyncio.gather(*lanes)
    await nc.close()
    return peak, solved


async def warm_up(url: str, n: int = 300) -> None:
    nc = await nats.connect(url)
    await asyncio.gather(*(nc.request("conductor.solve.client", BODY, timeout=120) for _ in range(n)))
    await nc.close()


def snapshot(pid: int, path: Path, to: Path) -> tracemalloc.Snapshot:
    """A tracemalloc snapshot of the executor (LAUNCHER), kept at ``to``."""
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 120
    size = -1
    while time.monotonic() < deadline:  # written when its size stops changing
        if path.exists() and path.stat().st_size == size and size > 0:
            break
        size = path.stat().st_size if path.exists() else -1
        time.sleep(0.5)
    path.rename(to)
    return tracemalloc.Snapshot.load(str(to))


def growth(idle: tracemalloc.Snapshot, loaded: tracemalloc.Snapshot, n: int, top: int) -> list[str]:
    """The allocation sites that grew most from ``idle`` to ``loaded``, bytes per task in flight, one line each
    with its innermost project frames."""
    lines = []
    for key in ("lineno", "traceback"):
        lines.append(f"-- by {key} (the allocating line first, then its callers)")
        for stat in loaded.compare_to(idle, key)[:top]:
            frames = [f"{Path(f.filename).name}:{f.lineno}" for f in reversed(stat.traceback)]
            size, count = stat.size_diff / n, stat.count_diff / n
            lines.append(f"{size:8.0f} B/task {count:6.2f} blocks/task  {' < '.join(frames)}")
    return lines


async def measure(
    url: str, env: dict[str, str], n: int, args: argparse.Namespace, tmp: Path
) -> dict[str, float]:
    procs = Processes()
    snap = tmp / "snapshot.bin"
    try:
        procs.serve("verifier", env)
        procs.serve("planner", env)
        procs.serve("worker-adapter", env)
        python = [sys.executable, "-X", f"tracemalloc={args.frames}", "-c", LAUNCHER] if args.trace else None
        executor = procs.serve("executor", {**env, "CONDUCTOR_BENCH_SNAPSHOT": str(snap)}, python=python)
        pid = executor.pid
        await warm_up(url)
        await asyncio.sleep(args.settle)
        idle = rss_mib(pid)
        # snapshot() polls with time.sleep: off the loop, or the load's client lanes would freeze while it waits
        idle_snap = (
            await asyncio.to_thread(snapshot, pid, snap, tmp / f"idle-{n}.bin") if args.trace else None
        )
        if args.trace:  # the snapshot mid-load, then the rest of the hold
            task = asyncio.create_task(hold(url, n, seconds=args.hold, ramp_s=args.ramp, pid=pid))
            await asyncio.sleep(args.ramp + (args.hold - args.ramp) / 2)
            loaded_snap = await asyncio.to_thread(snapshot, pid, snap, tmp / f"loaded-{n}.bin")
            peak, solved = await task
            assert idle_snap is not None
            print(f"\n== N={n}: growth idle -> loaded, by traceback (tracemalloc, {args.frames} frames)")
            for line in growth(idle_snap, loaded_snap, n, args.top):
                print(line)
            total = sum(s.size for s in loaded_snap.statistics("filename")) - sum(
                s.size for s in idle_snap.statistics("filename")
            )
            print(f"traced growth: {total / n:.0f} B per task in flight")
        else:
            peak, solved = await hold(url, n, seconds=args.hold, ramp_s=args.ramp, pid=pid)
        hwm = rss_mib(pid, "VmHWM")
    finally:
        procs.stop()
    return {
        "idle_rss_mib": round(idle, 1),
        "loaded_rss_mib": round(peak, 1),
        "kib_per_task": round((peak - idle) * 1024 / n, 1),
        "peak_rss_mib": round(hwm, 1),
        "peak_kib_per_task": round(hwm * 1024 / n, 1),
        "solves": solved,
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    tmp = tempdir()
    out: dict[str, object] = {"bench": "memory", "trace": args.trace}
    with NatsServer() as server:
        env = {
            "NATS_URL": server.url,
            "CONDUCTOR_POOL": str(zero_latency_pool(tmp, latency_s=1.0)),
            "CONDUCTOR_DURABLE": "0",
            "CONDUCTOR_HANDLER_CONCURRENCY": "20000",
        }
        for n in args.n:
            for key, value in (await measure(server.url, env, n, args, tmp)).items():
                out[f"n{n}.{key}"] = value
    out["target_kib_per_task"] = 32
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[2000, 5000], help="tasks in flight")
    parser.add_argument("--hold", type=float, default=10.0, help="seconds under load, ramp included")
    parser.add_argument("--ramp", type=float, default=3.0, help="seconds over which the lanes start")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds idle after the warm-up")
    parser.add_argument("--trace", action="store_true", help="tracemalloc in the executor (see above)")
    parser.add_argument("--frames", type=int, default=10, help="traceback depth under --trace")
    parser.add_argument("--top", type=int, default=30)
    report(asyncio.run(main(parser.parse_args())))
