"""Kills and outages of every service kind, and overload beyond the pool, with the services as real processes.

``run_kills`` runs one process per service kind (planner, worker-adapter, verifier, executor; optionally two
replicas of a kind) against a provider that answers after a latency, submits durable tasks with references (so
every task is planned, worked and verified), and at evenly spread points of progress SIGKILLs a random replica of
the named kind, keeps it down for the named outage, and starts a replacement. It records when each replacement
was ready and how long until the next task completed (the recovery bound), and audits exactly-once (one result
and one result event per task, worker calls answered twice at most as many as were in flight at the provider when
a worker-adapter died) and dead letters.

``run_overload`` sends request/reply solves far beyond what the pool can serve, with a short client timeout, and
reports the latest provider call's arrival against the clients' deadline: an abandoned solve must not start new
paid calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import nats
import nats.js.errors
from nats.js import JetStreamContext

from bench.processes import Service
from conductor.access import CLIENT
from conductor.client import ConductorClient, SolveTimeoutError
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest, SolveResult
from schemas.tasks import INTAKE_CONSUMER, Names, task_key
from tests.chaos.harness import ROOT, _results_so_far, pool_file

KINDS = ("planner", "worker-adapter", "verifier", "executor")


class Outage(msgspec.Struct, kw_only=True):
    kind: str
    down_s: float  # 0: the replacement is started at once
    at_results: int = 0
    replicas: int = 1
    # Calls in flight at the provider when a worker-adapter was killed (read just before and just after the kill;
    # with one replica, those still in flight after it are the dead replica's): their answers are lost with the
    # process, so they may be paid again.
    provider_in_flight: int = 0
    done_at_kill: int = 0
    killed_wall: float = 0.0  # unix time of the kill, to match re-executed calls against
    done_at_ready: int = 0
    killed_at: float = 0.0
    ready_at: float = 0.0
    resumed_after_s: float | None = (
        None  # from the replacement being ready (or the kill, with another replica)
    )


LOST_WINDOW_S = (3.0, 1.0)  # a call first answered this long before / after a kill may have been lost with it


def unexcused_reexecutions(report: KillReport, latency_s: float) -> list[float]:
    """Re-executed calls whose first answer was not around a worker-adapter kill (in flight when it died, or
    answered but not yet delivered): those were paid twice for no crash, which exactly-once forbids."""
    kills = [o.killed_wall for o in report.outages if o.kind == "worker-adapter" and o.killed_wall]
    before, after = LOST_WINDOW_S
    first = report.provider.get("reexecuted_first_at", [])
    return [t for t in first if not any(k - before <= t <= k + latency_s + after for k in kills)]  # type: ignore[union-attr]


class KillReport(msgspec.Struct, kw_only=True):
    tasks: int
    results: int = 0
    results_with_error: int = 0
    error_codes: dict[str, int] = {}
    result_events_published: int = 0
    dead_letters: int = 0
    reexecuted_calls: int = 0
    provider: dict[str, object] = {}
    outages: list[Outage] = []
    max_tasks_taken: int = 0  # the most tasks the executors held un-acked at once (admission)
    latency_s: float = 0.0
    wall_s: float = 0.0


class Fleet:
    """The nats-server, the fault provider and every service process, by kind."""

    def __init__(
        self,
        tmp: Path,
        *,
        replicas: dict[str, int],
        latency_s: float,
        fault_rate: float,
        concurrency: int,
        env: dict[str, str],
    ) -> None:
        self.tmp = tmp
        # As `serve all` runs it: a NATS user per service kind, each with only its role's permissions.
        self.nats = NatsServer.secured(port=free_port(), store_dir=tmp / "jetstream")
        self.fault_port = free_port()
        self._fault_args = [str(self.fault_port), str(fault_rate), "11", str(latency_s)]
        self.faults: subprocess.Popen[bytes] | None = None
        self.replicas = replicas
        self.concurrency = concurrency
        self.extra_env = env
        self.services: dict[str, list[Service]] = {}

    def start(self) -> None:
        self.nats.start()
        self.faults = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.fault_server", *self._fault_args],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        assert self.faults.stdout is not None and self.faults.stdout.readline().strip() == b"ready"
        env = {
            **self.nats.env(),  # NATS_URL and the credentials file: each process connects as its own kind
            "CONDUCTOR_POOL": str(
                pool_file(
                    self.tmp,
                    self.fault_port,
                    concurrency=self.concurrency,
                    timeout_s=10,
                    name="kills_pool.toml",
                )
            ),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            "CONDUCTOR_METRICS_PORT": "off",
            "CONDUCTOR_DRAIN_TIMEOUT_S": "5",
            **self.extra_env,
        }
        for kind in KINDS:
            self.services[kind] = [
                Service(kind, env, self.tmp / f"{kind}-{i}.log") for i in range(self.replicas.get(kind, 1))
            ]
        for kind in KINDS:  # the executor last: it declares the durable consumer once the others serve
            for svc in self.services[kind]:
                svc.start()

    def stop(self) -> None:
        for kind in reversed(KINDS):
            for svc in self.services.get(kind, []):
                svc.stop()
        if self.faults is not None:
            self.faults.kill()
            self.faults.wait()
        self.nats.stop()

    @property
    def settings(self) -> CommonSettings:
        """What a client of the fleet connects with (as the user ``client``)."""
        return CommonSettings.from_env(self.nats.env())

    def url_for(self, user: str) -> str:
        assert self.nats.passwords is not None
        return f"nats://{user}:{self.nats.passwords[user]}@127.0.0.1:{self.nats.port}"

    async def connect(self, user: str, **options: object) -> nats.NATS:
        """A plain connection as ``user``, on its own inbox prefix (the only one it may subscribe to)."""
        return await nats.connect(self.url_for(user), inbox_prefix=f"_INBOX.{user}", **options)  # type: ignore[arg-type]

    def provider_stats(self) -> dict[str, object]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.fault_port}/stats", timeout=5) as resp:
            return json.loads(resp.read())


class Progress:
    """Results stored so far, sampled every ``period`` seconds: (monotonic time, count)."""

    def __init__(self, fleet: Fleet, names: Names, period: float = 0.25) -> None:
        self.fleet, self.names, self.period = fleet, names, period
        self.samples: list[tuple[float, int]] = [(time.monotonic(), 0)]
        self.max_taken = 0

    @property
    def done(self) -> int:
        return self.samples[-1][1]

    async def run(self) -> None:
        while True:
            # The bucket's count is the executor's to read: a tenant sees its own results only (docs/tenancy.md).
            url = self.fleet.url_for("executor")
            count = await _results_so_far(url, self.names, inbox_prefix="_INBOX.executor")
            if count >= 0:
                self.samples.append((time.monotonic(), count))
            self.max_taken = max(self.max_taken, await self._taken())
            await asyncio.sleep(self.period)

    async def _taken(self) -> int:
        try:
            nc = await self.fleet.connect("client", connect_timeout=1, max_reconnect_attempts=0)
        except Exception:  # restarting: sampled again next period
            return 0
        try:
            info = await nc.jetstream().consumer_info(self.names.tasks_stream, INTAKE_CONSUMER)
            return int(info.num_ack_pending)
        except nats.errors.Error:
            return 0
        finally:
            await nc.close()

    def first_completion_after(self, t: float, total: int) -> float | None:
        """Seconds from ``t`` to the first sample after it with more results than at ``t``."""
        before = max((c for s, c in self.samples if s <= t), default=0)
        if before >= total:
            return 0.0  # nothing was left to resume
        for s, c in self.samples:
            if s > t and c > before:
                return s - t
        return None


async def run_kills(
    tmp: Path,
    *,
    tasks: int,
    outages: list[tuple[str, float]],
    replicas: dict[str, int] | None = None,
    latency_s: float = 0.2,
    fault_rate: float = 0.0,
    concurrency: int = 64,
    env: dict[str, str] | None = None,
    timeout_s: float,
    seed: int = 5,
) -> KillReport:
    """Submit ``tasks`` durable tasks and apply ``outages`` (kind, seconds down) at evenly spread progress."""
    fleet = Fleet(
        tmp,
        replicas=replicas or {},
        latency_s=latency_s,
        fault_rate=fault_rate,
        concurrency=concurrency,
        env=env or {},
    )
    names = Names.for_prefix("")
    rng = random.Random(seed)
    report = KillReport(tasks=tasks, latency_s=latency_s)
    plan = [
        Outage(
            kind=k,
            down_s=d,
            at_results=int(tasks * (i + 1) / (len(outages) + 1)),
            replicas=(replicas or {}).get(k, 1),
        )
        for i, (k, d) in enumerate(outages)
    ]
    started = time.monotonic()
    fleet.start()
    progress = Progress(fleet, names)
    sampler = asyncio.create_task(progress.run())
    try:
        async with ConductorClient(fleet.settings) as client:
            for i in range(tasks):
                await client.submit(
                    SolveRequest(
                        question=f"Task {i}: what is {i} + {i}?",
                        task_id=f"task-{i}",
                        policy="refine:2",
                        reference=str(2 * i),
                    )
                )
        deadline = time.monotonic() + timeout_s
        pending = list(plan)
        background: list[asyncio.Task[None]] = []
        while time.monotonic() < deadline and progress.done < tasks:
            if pending and progress.done >= pending[0].at_results:
                outage = pending.pop(0)
                if outage.replicas > 1:  # the other replica serves meanwhile: the next outage need not wait
                    background.append(asyncio.create_task(_outage(fleet, outage, rng, progress)))
                else:
                    await _outage(fleet, outage, rng, progress)
            await asyncio.sleep(0.2)
        await asyncio.gather(*background)
        await asyncio.sleep(1.0)  # the last sample and any straggling duplicate event
        for outage in plan:
            since = outage.killed_at if outage.replicas > 1 else outage.ready_at
            outage.resumed_after_s = progress.first_completion_after(since, tasks) if since else None
        report.outages = plan
        report.max_tasks_taken = progress.max_taken
        report.wall_s = time.monotonic() - started
        await _audit(fleet, names, report)
        return report
    finally:
        sampler.cancel()
        fleet.stop()


async def _outage(fleet: Fleet, outage: Outage, rng: random.Random, progress: Progress) -> None:
    victim = rng.choice(fleet.services[outage.kind])
    before = int(fleet.provider_stats()["in_flight"])  # type: ignore[call-overload]
    victim.kill()
    outage.killed_at, outage.killed_wall = time.monotonic(), time.time()
    outage.done_at_kill = progress.done
    if outage.kind == "worker-adapter":
        after = int(fleet.provider_stats()["in_flight"])  # type: ignore[call-overload]
        outage.provider_in_flight = max(before, after)
    await asyncio.sleep(outage.down_s)
    await asyncio.to_thread(victim.start)
    outage.ready_at = time.monotonic()
    outage.done_at_ready = progress.done


async def stored_results(js: JetStreamContext, names: Names, tasks: int) -> dict[str, SolveResult]:
    """The stored result of every task submitted (``task-<i>``), read key by key: listing the bucket's keys would
    need a consumer on it, which no user but its writer may create."""
    kv = await js.key_value(names.results_bucket)
    out = {}
    for i in range(tasks):
        with contextlib.suppress(nats.js.errors.KeyNotFoundError):
            entry = await kv.get(task_key(CLIENT, f"task-{i}"))  # the tenant client's task (docs/tenancy.md)
            if entry.value:
                out[f"task-{i}"] = msgspec.json.decode(entry.value, type=SolveResult)
    return out


async def _audit(fleet: Fleet, names: Names, report: KillReport) -> None:
    nc = await fleet.connect("executor")  # the stream counts are the executor's to read
    try:
        js = nc.jetstream()
        results = await stored_results(js, names, report.tasks)
        report.result_events_published = int(
            (await js.stream_info(names.result_events_stream)).state.last_seq
        )
        report.dead_letters = int((await js.stream_info(names.dead_stream)).state.messages)
    finally:
        await nc.close()
    report.results = sum(1 for tid, r in results.items() if r.task_id == tid and tid.startswith("task-"))
    errors = [str(r.error.code) for r in results.values() if r.error is not None]
    report.results_with_error = len(errors)
    report.error_codes = {c: errors.count(c) for c in set(errors)}
    report.provider = fleet.provider_stats()
    report.reexecuted_calls = int(report.provider["reexecuted"])  # type: ignore[call-overload]


class OverloadReport(msgspec.Struct, kw_only=True):
    solves: int
    client_timeout_s: float
    timed_out: int = 0
    answered: int = 0
    provider_calls: int = 0
    capacity_calls: float = 0.0  # what the pool could have answered before the deadline
    last_call_after_deadline_s: float = 0.0  # the latest provider call's arrival minus the clients' deadline
    calls_after_deadline_window: int = 0  # provider calls that arrived in the 3 s after the deadline + 0.5 s


async def run_overload(
    tmp: Path, *, solves: int, client_timeout_s: float, latency_s: float, concurrency: int
) -> OverloadReport:
    """``solves`` request/reply solves at once, each abandoned by its client after ``client_timeout_s``."""
    fleet = Fleet(
        tmp,
        replicas={},
        latency_s=latency_s,
        fault_rate=0.0,
        concurrency=concurrency,
        env={"CONDUCTOR_DURABLE": "0"},
    )
    report = OverloadReport(solves=solves, client_timeout_s=client_timeout_s)
    fleet.start()
    try:
        async with ConductorClient(fleet.settings) as client:
            deadline = time.time() + client_timeout_s

            async def one(i: int) -> bool:
                try:
                    await client.solve(
                        SolveRequest(question=f"Q{i}: {i} + {i}?", policy="refine:2"),
                        timeout=client_timeout_s,
                    )
                    return True
                except SolveTimeoutError:
                    return False

            outcomes = await asyncio.gather(*(one(i) for i in range(solves)))
        report.answered = sum(outcomes)
        report.timed_out = solves - report.answered
        before = int(fleet.provider_stats()["requests"])  # type: ignore[call-overload]
        await asyncio.sleep(3.5)  # anything still starting now is paid for nobody
        stats = fleet.provider_stats()
        report.provider_calls = int(stats["requests"])  # type: ignore[call-overload]
        report.calls_after_deadline_window = report.provider_calls - before
        report.last_call_after_deadline_s = float(stats["last_request_at"]) - deadline  # type: ignore[arg-type]
        report.capacity_calls = 3 * concurrency * client_timeout_s / latency_s
        return report
    finally:
        fleet.stop()
