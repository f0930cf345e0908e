"""A sample's memory budget is for the whole sample, not per process, and the layer report says how it is enforced.

An address-space rlimit bounds one process; a sample may fork. With 64 processes of 2 GiB each, one sample could
take 128 GiB in the worst case (six children of 1 GiB took 5.3 GB of host memory). The bound that holds whatever
the program does is a cgroup's memory.max over the sample's tree. This host offers no delegable cgroup v2 memory
controller (the check below says which), so the budget is enforced as the product of two rlimits: at most
``processes`` processes (RLIMIT_NPROC, which also counts threads) of at most ``total / processes`` address space
each. That product can never exceed the total, at the price of a per-process ceiling (8 × 256 MiB by default, the
usual 256 MB of a programming-contest judge).
"""

from __future__ import annotations

import os

import msgspec

from services.verifier.config import Limits

CGROUP_ROOT = "/sys/fs/cgroup"
MIN_PER_PROCESS_MB = 64  # below this a Python interpreter cannot start (a fork of the zygote maps ~30 MB)


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    mode: str  # "rlimits" (process cap × per-process address space)
    total_mb: int
    processes: int
    per_process_mb: int
    cgroup: str  # what the host offers, for the report

    def describe(self) -> str:
        return (
            f"memory: {self.total_mb} MiB per sample via {self.mode} "
            f"({self.processes} processes x {self.per_process_mb} MiB); cgroup v2: {self.cgroup}"
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
    return "available (not used: the rlimit product is the enforced bound)"


def plan(limits: Limits) -> Budget:
    """Split the total between the process cap and the per-process limit so their product fits the total."""
    processes = max(1, min(limits.nproc, limits.memory_mb // MIN_PER_PROCESS_MB))
    return Budget(
        mode="rlimits",
        total_mb=limits.memory_mb,
        processes=processes,
        per_process_mb=limits.memory_mb // processes,
        cgroup=cgroup_v2_memory(),
    )
