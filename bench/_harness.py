"""Shared benchmark plumbing: a private nats-server, service processes, a raw nats-py baseline, percentiles."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nats

from conductor.natsserver import NatsServer

ROOT = Path(__file__).resolve().parents[1]

RAW_RESPONDER = """
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1])
    async def echo(msg):
        await msg.respond(msg.data)
    await nc.subscribe("bench.raw", queue="raw", cb=echo)
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def zero_latency_pool(tmp: Path, *, latency_s: float = 0.0, concurrency: int = 100_000) -> Path:
    """The demo pool's workers with no simulated latency, so only the system is measured."""
    data = ROOT / "conductor" / "data" / "demo_questions.jsonl"
    lines = ["reveal_names = false"]
    for i, name in enumerate(["sim-a", "sim-b", "sim-c"]):
        lines += [
            "[[workers]]",
            f'name = "{name}"',
            'provider = "sim"',
            f'model = "{name}"',
            f'description = "simulated worker {i}"',
            "price_in_per_mtok = 0.1",
            "price_out_per_mtok = 0.2",
            f"concurrency = {concurrency}",
            "[workers.sim]",
            f'dataset = "{data}"',
            "skill = { math = 0.7, mcq = 0.7, general = 0.7 }",
            f"latency_s = {latency_s}",
            f"seed = {i}",
        ]
    path = tmp / "pool.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Processes:
    """Start `conductor serve ...` processes and the raw responder; stop them all on exit."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def serve(
        self, services: str, env: dict[str, str], *, python: list[str] | None = None
    ) -> subprocess.Popen[str]:
        """``python``: the interpreter's command line up to the program (default: this interpreter; a benchmark
        may pass ``[sys.executable, "-X", "tracemalloc=8", "-c", LAUNCHER]``, whose program then reads argv)."""
        argv = [*(python or [sys.executable, "-m", "conductor.app.cli"]), "serve", services]
        proc = subprocess.Popen(
            argv,
            env={**os.environ, "CONDUCTOR_LOG_LEVEL": "WARNING", **env},
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("serving"):
                break
        else:
            raise RuntimeError(f"`conductor serve {services}` exited with {proc.wait()}")
        # Keep draining its stderr, or a full pipe would block the service mid-benchmark.
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        self.procs.append(proc)
        return proc

    def raw_responder(self, url: str) -> int:
        """Start the baseline's plain nats-py responder; its pid."""
        proc = subprocess.Popen([sys.executable, "-c", RAW_RESPONDER, url], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        self.procs.append(proc)
        return proc.pid

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()


async def raw_round_trip(url: str, n: int = 3000, responder: int | None = None) -> dict[str, float]:
    """Sequential request/reply to a plain nats-py responder in another process: the baseline hop. With the
    responder's ``pid``, also the CPU each side spent per round trip (this process is the requester)."""
    nc = await nats.connect(url)
    for _ in range(200):
        await nc.request("bench.raw", b"x" * 64, timeout=5)
    lat = []
    own, theirs = own_cpu_s(), cpu_s(responder) if responder else 0.0
    for _ in range(n):
        t = time.perf_counter()
        await nc.request("bench.raw", b"x" * 64, timeout=5)
        lat.append(time.perf_counter() - t)
    own, theirs = own_cpu_s() - own, (cpu_s(responder) - theirs) if responder else 0.0
    await nc.close()
    out = {
        "p50_ms": pct(lat, 0.5) * 1e3,
        "p90_ms": pct(lat, 0.9) * 1e3,
        "mean_ms": statistics.fmean(lat) * 1e3,
        "requester_cpu_us": own / n * 1e6,
    }
    if responder:
        out["responder_cpu_us"] = theirs / n * 1e6
    return out


def own_cpu_s() -> float:
    """User + system CPU seconds this process has used so far."""
    t = os.times()
    return t.user + t.system


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of a process from /proc (``VmHWM`` for the peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise LookupError(field)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(result: dict[str, object]) -> None:
    """Human-readable lines, then the one JSON object every benchmark prints last."""
    for key, value in result.items():
        print(f"{key:45s} {value}")
    print(json.dumps(result))


def tempdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="conductor-bench-"))


__all__ = [
    "NatsServer",
    "Processes",
    "cpu_s",
    "pct",
    "raw_round_trip",
    "report",
    "rss_mib",
    "tempdir",
    "zero_latency_pool",
]
