"""The host side of the sandbox: start the supervisors, learn which isolation layers are really active, send jobs.

Layer status comes from each supervisor's own probe from the inside, plus what only the host knows (the backend).
A missing layer is logged as a warning at start-up; a missing *required* layer makes every code job an
infrastructure error instead of running the program with less isolation than the operator asked for.
"""

from __future__ import annotations

import math
import shutil

import msgspec
import structlog

from services.verifier.config import ALL_LAYERS, Settings
from services.verifier.processes import Launch, Lease, ProcessSet
from services.verifier.sandbox import budget, launcher

log = structlog.get_logger("conductor.verifier.sandbox")


class LayerReport(msgspec.Struct, frozen=True, kw_only=True):
    backend: str
    active: dict[str, bool]
    memory: str = ""  # how the sample's total memory is bounded (budget.Budget.describe)

    @property
    def missing(self) -> list[str]:
        return [name for name in ALL_LAYERS if not self.active.get(name, False)]

    def describe(self) -> str:
        on = ", ".join(n for n in ALL_LAYERS if self.active.get(n))
        off = ", ".join(self.missing) or "none"
        return f"backend={self.backend}; active: {on}; missing: {off}; {self.memory}"


class SandboxRefused(Exception):
    """Required isolation layers are missing, so code is not run at all."""


class Sandbox:
    """A set of warm sandbox supervisors plus what they reported about their isolation."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.backend = launcher.choose_backend(settings)
        self.processes = ProcessSet(
            "sandbox", self._spawn, settings.sandbox_workers, settings.worker_start_timeout_s
        )
        self.budget = budget.plan(settings.limits)
        self.layers = LayerReport(backend=self.backend, active={}, memory=self.budget.describe())
        self.refusal: str | None = None
        self.scratch_dirs: dict[int, str] = {}  # per slot, its current supervisor's host dir

    def _spawn(self, slot: int) -> Launch:
        # A slot is respawned only once its supervisor is dead or killed: its dir can go (the sandbox root's empty
        # mount points, or the files a non-bwrap sample left).
        previous = self.scratch_dirs.pop(slot, None)
        if previous:
            shutil.rmtree(previous, ignore_errors=True)
        plan = launcher.plan(self.settings, slot, self.backend)
        if plan.scratch:
            self.scratch_dirs[slot] = plan.scratch
        return Launch(argv=plan.argv, env=plan.env or None, cwd="/", data=plan.seccomp)

    async def start(self) -> LayerReport:
        hellos = await self.processes.start()
        active = {name: all(h["layers"].get(name, False) for h in hellos) for name in hellos[0]["layers"]}
        if self.backend != "bwrap":
            active["hidden"] = False
        self.layers = LayerReport(backend=self.backend, active=active, memory=self.budget.describe())
        missing_required = [n for n in self.settings.sandbox_require if not active.get(n, False)]
        if self.layers.missing:
            log.warning("SANDBOX ISOLATION INCOMPLETE", layers=self.layers.describe())
        if missing_required:
            self.refusal = (
                f"required sandbox layers missing: {', '.join(missing_required)} ({self.layers.describe()})"
            )
            log.error("REFUSING TO RUN CODE", reason=self.refusal)
        return self.layers

    async def close(self) -> None:
        await self.processes.close()
        for path in self.scratch_dirs.values():
            shutil.rmtree(path, ignore_errors=True)
        self.scratch_dirs.clear()

    def limits(self, timeout: float) -> dict:
        lim = self.settings.limits
        mb = 1024 * 1024
        return {
            "memory": self.budget.per_process_mb * mb,  # address space of one process (a backstop)
            "resident": self.budget.total_mb
            * mb,  # the whole sample's anonymous resident memory (the budget)
            "cpu": max(1, math.ceil(timeout) + 1),
            "fsize": lim.fsize_mb * mb,
            "nproc": self.budget.processes,
            "nofile": lim.nofile,
            "output": lim.output_mb * mb,
            "result": lim.output_mb * mb,  # one call's reply, and (×2) all of a job's replies together
            "timeout": timeout,  # CPU seconds of the sample's whole process tree (stdin jobs); wall clock otherwise
            "wall": self.wall(timeout),
        }

    @staticmethod
    def wall(timeout: float) -> float:
        """The wall-clock backstop of a CPU-timed job: room for a sample starved by its neighbours to still finish,
        but finite for one that sleeps or blocks."""
        return 2 * timeout + 1

    def host_deadline(self, inner: float) -> float:
        """Our own deadline for a job whose inner wall clock is ``inner``: generous, but always finite."""
        return inner * 1.5 + self.settings.sandbox_grace_s

    def lease(self):  # an async context manager yielding a Lease
        if self.refusal:
            raise SandboxRefused(self.refusal)
        return self.processes.lease()

    async def run(self, lease: Lease, job: dict, inner: float) -> dict:
        return await lease.call(job, self.host_deadline(inner))
