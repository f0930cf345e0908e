"""A sample's memory budget is for the whole sample, not per process, and the layer report says how it is enforced.

An address-space rlimit bounds one process; a sample may fork. The first bound here was the product of two rlimits
(8 processes × 256 MiB of address space each), which holds whatever the program does but cannot run a real
data-science program: ``import pandas`` alone maps more than 256 MiB of address space, and pandas, matplotlib and
scikit-learn together map about 630 MiB while only 235 MiB of it is ever resident (BigCodeBench, issue 20).

So the budget is on what a sample actually holds: the supervisor sums the **anonymous resident memory** (RssAnon:
heap, stacks, written mappings; not the shared library pages, which are the page cache's and evictable) of every
process of the sample, at the same 50 ms cadence it reads their CPU time, and ends the sample as *memory limit
exceeded* when the sum passes the total. Two rlimits stay as backstops: each process's address space is at most
the total (one process can never even map more than the sample may hold), and at most ``processes`` processes and
threads. The overshoot is what a sample can write between two readings: on this 2-core host about 0.2 GiB per
running process. The bound that holds to the byte would be a cgroup's memory.max over the sample's tree; this host
offers no delegable cgroup v2 memory controller (the check below says which), and a pod usually cannot create
cgroups, so the watch is the portable bound.

The default total (2048 MiB) is set from the BigCodeBench sample: its heaviest canonical solution peaks at about
250 MiB resident (``bench/bigcodebench_bench.py`` prints the five heaviest), so the default leaves 8× margin.
"""

from __future__ import annotations

import os

import msgspec

from services.verifier.config import Limits

CGROUP_ROOT = "/sys/fs/cgroup"
MIN_TOTAL_MB = 64  # below this a Python interpreter cannot start (a fork of the zygote maps ~30 MB)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    mode: str  # "resident" (the whole tree's anonymous resident memory, watched) with address-space backstops
    total_mb: int
    processes: int
    per_process_mb: int  # address space of one process: never more than the total
    cgroup: str  # what the host offers, for the report

    def describe(self) -> str:
        return (
            f"memory: {self.total_mb} MiB per sample, {self.mode} (the whole tree, read every 50 ms; "
            f"<= {self.processes} processes, each <= {self.per_process_mb} MiB address space); cgroup v2: {self.cgroup}"
        )


def cgroup_v2_memory() -> str:
    """Whether a cgroup v2 memory controller is available to us here ("available", or why not)."""
    controllers = os.path.join(CGROUP_ROOT, "cgroup.controllers")
    try:
        with open(controllers) as fh:
            offered = set(fh.read().split())
    except OSError:
        return "not mounted at /sys/fs/cgroup (v1 or hybrid hierarchy)"
    if not {"memory", "pids"} <= offered:
        return f"no memory/pids controller (offered: {', '.join(sorted(offered)) or 'none'})"
    if not os.access(CGROUP_ROOT, os.W_OK):
        return "not writable by this process"
    return "available (not used: the watched resident total is the enforced bound)"


def plan(limits: Limits) -> Budget:
    total = max(MIN_TOTAL_MB, limits.memory_mb)
    return Budget(
        mode="resident",
        total_mb=total,
        processes=max(1, limits.nproc),
        per_process_mb=total,
        cgroup=cgroup_v2_memory(),
    )
