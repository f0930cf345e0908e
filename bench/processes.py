"""``conductor serve ...`` as real processes, each with its log in a file, and their Prometheus metrics summed: the
process plumbing the benchmarks and the chaos and rollout tests share (tests/ builds on bench/, never the reverse).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]


class Service:
    """A `conductor serve ...` process with its log in a file (a pipe left unread would block it)."""

    def __init__(self, services: str, env: dict[str, str], log: Path) -> None:
        self.services, self.env, self.log = services, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        start_at = self.log.stat().st_size if self.log.exists() else 0
        fh = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conductor.app.cli", "serve", self.services],
            env={**os.environ, **self.env},
            stdout=fh,
            stderr=fh,
            cwd=ROOT,
        )
        fh.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.log.open("rb") as f:
                f.seek(start_at)
                if b"\nserving " in b"\n" + f.read():
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve {self.services} exited {self.proc.returncode}; see {self.log}")
            time.sleep(0.1)
        raise RuntimeError(f"serve {self.services} did not come up; see {self.log}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def scrape(port: int, names: list[str], split: dict[str, str] | None = None) -> dict[str, float]:
    """Sum each named metric over all its label sets, from a service's Prometheus endpoint; for a metric named in
    ``split`` also one sum per value of that label, keyed ``conductor_worker_faults_total{reason="timeout"}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    sums = dict.fromkeys(names, 0.0)
    samples = (s for family in text_string_to_metric_families(text) for s in family.samples)
    for sample in samples:
        if sample.name not in sums:
            continue
        sums[sample.name] += sample.value
        label = (split or {}).get(sample.name)
        if label is not None:
            key = f'{sample.name}{{{label}="{sample.labels.get(label, "")}"}}'
            sums[key] = sums.get(key, 0.0) + sample.value
    return sums
