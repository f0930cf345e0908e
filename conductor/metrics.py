"""Prometheus metrics of every service, defined once per process and observed at handler boundaries.

Defined at module level in a registry of our own: `serve all` runs several services in one process and tests
create many service instances, so a metric must never be registered twice (prometheus_client raises on that);
module import happens once. A private registry keeps `/metrics` to our series plus the process collectors, whatever
else the host process registers in the default one.

Label values are bounded by construction: outcomes are ``ok`` or an ``ErrorCode``; workers are pool names, taken
only from replies the pool accepted (a request naming an unknown worker counts as a bad request, never as a new
``worker`` label); fault reasons are ``FaultReason`` values (anything else a reply might carry counts as ``other``);
subjects are the unprefixed subject constants.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import PlanReply
from schemas.rollout import RolloutResult
from schemas.solve import SolveResult
from schemas.usage import Usage
from schemas.verify import Verdict
from schemas.work import FaultReason, WorkReply, WorkRequest

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# From a sub-millisecond sim hop to a long multi-round task.
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


def _counter(name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
    return Counter(name, doc, labels, registry=REGISTRY)


REFUSED_REPLIES = _counter(
    "conductor_refused_replies",
    "Requests dropped unanswered and unrun because their reply subject was not inside a requester's inbox "
    "(a confused-deputy attempt: a reply aimed at a result, event, KV or JetStream API subject).",
    ["subject"],
)
STORE_REFUSED = _counter(
    "conductor_store_entries_refused",
    "Stored entries a reader treated as absent (issue 34): store is the bucket or stream kind (results, "
    "result_events, cancels, gateway_quota, worker_limits, policy_versions); reason is undecodable or foreign "
    "(another tenant's, key's or task's). nats-server stores what is aimed at a subject as a reply, so a count here "
    "is a write nobody meant.",
    ["store", "reason"],
)
TASKS = _counter(
    "conductor_tasks", "Tasks finished by the executor, by outcome (ok or the error code).", ["outcome"]
)
STEPS = _counter("conductor_steps", "Workflow steps run by the executor.", ["worker", "outcome"])
WORKER_CALLS = _counter(
    "conductor_worker_calls",
    "Worker calls answered by the worker adapter, each once: a reply replayed from the call ledger (a resumed task, "
    "a duplicate after a NATS restart) counts in conductor_worker_replays instead.",
    ["worker", "outcome"],
)
WORKER_REPLAYS = _counter(
    "conductor_worker_replays",
    "Finished worker calls answered again from the call ledger: no provider call, no tokens or dollars counted.",
    ["worker"],
)
WORKER_RETRIES = _counter(
    "conductor_worker_retries",
    "Extra tries of worker calls (attempts - 1); reason: recovered (then succeeded) or exhausted (still failed).",
    ["worker", "reason"],
)
WORKER_FAULTS = _counter(
    "conductor_worker_faults",
    "Failed tries of worker calls by reason (rate_limited, server_error, timeout, ...; see FaultReason), "
    "each call's last failed try included; replayed and cached replies are not counted again.",
    ["worker", "reason"],
)
REDELIVERIES = _counter(
    "conductor_redeliveries", "Durable task deliveries after the first (JetStream redelivery)."
)
DEAD_LETTERS = _counter(
    "conductor_dead_letters", "Durable tasks given up after MaxDeliver transient failures."
)
CACHE_HITS = _counter("conductor_cache_hits", "Worker calls answered from the worker-call cache.", ["worker"])
CACHE_MISSES = _counter(
    "conductor_cache_misses", "Cache-enabled worker calls the cache could not answer.", ["worker"]
)
TOKENS = _counter("conductor_tokens", "Worker tokens by direction (input, output).", ["worker", "direction"])
COST = _counter("conductor_cost_usd", "Worker cost in US dollars, each paid call's once.", ["worker"])
PLANS = _counter(
    "conductor_plans", "Planner replies by outcome (ok, handback or the error code).", ["outcome"]
)
PLAN_FALLBACKS = _counter("conductor_plan_fallbacks", "Workflows written by the fallback planner.")
PLAN_FORMAT_FAILURES = _counter(
    "conductor_plan_format_failures", "Conductor samples rejected as unparseable (each triggers a resample)."
)
VERDICTS = _counter("conductor_verdicts", "Verifier verdicts by outcome.", ["outcome"])
BAD_REQUESTS = _counter(
    "conductor_bad_requests", "Requests rejected as malformed or invalid, by subject.", ["subject"]
)
STAGE_LATENCY = Histogram(
    "conductor_stage_latency_seconds",
    "Latency by stage: solve (task), plan, work (worker call), verify (batch), step (as the executor sees it).",
    ["stage"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)
WORKER_LATENCY = Histogram(
    "conductor_worker_latency_seconds",
    "Worker call latency by worker.",
    ["worker"],
    buckets=_BUCKETS,
    registry=REGISTRY,
)

_REJECTED = {ErrorCode.BAD_REQUEST, ErrorCode.PAYLOAD_TOO_LARGE}
_FAULT_REASONS = frozenset(str(r) for r in FaultReason)


_SERIES: dict[tuple[object, tuple[str, ...]], Any] = {}


def _series(metric: Counter | Gauge | Histogram, *labels: str) -> Any:
    """``metric.labels(*labels)``, looked up once per label set: prometheus_client's ``labels()`` validates and
    locks on every call, a measurable share of a worker call's CPU at thousands of calls per second. Bounded for
    the same reason the label values are (module docstring)."""
    key = (metric, labels)
    child = _SERIES.get(key)
    if child is None:
        child = _SERIES[key] = metric.labels(*labels)
    return child


def outcome(error: ErrorInfo | None) -> str:
    return "ok" if error is None else str(error.code)


def exposition() -> bytes:
    """The text exposition format served on ``/metrics``."""
    return generate_latest(REGISTRY)


def refused_reply(subject: str) -> None:
    _series(REFUSED_REPLIES, subject).inc()


def store_entry_refused(store: str, reason: str) -> None:
    """A stored entry read as absent (``STORE_REFUSED``); ``store`` and ``reason`` are constants of the callers."""
    _series(STORE_REFUSED, store, reason).inc()


def bad_request(subject: str) -> None:
    _series(BAD_REQUESTS, subject).inc()


def task_finished(result: SolveResult, subject: str) -> None:
    """A final result left the executor: count it; a rejected request also counts as a bad request on ``subject``
    and stays out of the latency histogram (it never ran)."""
    _series(TASKS, outcome(result.error)).inc()
    if result.error is not None and result.error.code in _REJECTED:
        bad_request(subject)
        return
    _series(STAGE_LATENCY, "solve").observe(result.latency_s)


def task_rejected(result: SolveResult) -> None:
    """A solve request rejected before it ran: counted as a task by its outcome (``serve`` already counted it as a
    bad request on its subject)."""
    _series(TASKS, outcome(result.error)).inc()


def step_finished(worker: str, error: ErrorInfo | None, seconds: float) -> None:
    _series(STEPS, worker, outcome(error)).inc()
    _series(STAGE_LATENCY, "step").observe(seconds)


def plan_finished(reply: PlanReply, seconds: float) -> None:
    _series(PLANS, "handback" if reply.error is None and reply.handback else outcome(reply.error)).inc()
    if reply.fallback_used:
        PLAN_FALLBACKS.inc()
    if reply.format_failures:
        PLAN_FORMAT_FAILURES.inc(len(reply.format_failures))
    _series(STAGE_LATENCY, "plan").observe(seconds)


def work_finished(req: WorkRequest, reply: WorkReply, subject: str) -> None:
    """Calls, retries, faults, tokens, cost, cache and latency of one worker call, all from its reply.

    A replayed reply (the ledger's record of a call that already finished: services/worker_adapter/ledger.py) was
    counted — call, retries, faults, tokens and dollars — when the call first finished, on whichever replica paid
    for it; counting it again made a NATS restart's resent steps look paid twice (issue 19, item 7: 1,550 calls
    reported for 1,500 paid). It counts as a replay and in the latency histograms only. A cache hit made no try."""
    if reply.error is not None and reply.error.code == ErrorCode.BAD_REQUEST:
        bad_request(subject)  # the worker name may be anything here: no per-worker series for it
        return
    worker = reply.worker
    _series(WORKER_LATENCY, worker).observe(reply.latency_s)
    _series(STAGE_LATENCY, "work").observe(reply.latency_s)
    if reply.replayed:
        _series(WORKER_REPLAYS, worker).inc()
        return
    _series(WORKER_CALLS, worker, outcome(reply.error)).inc()
    if reply.attempts > 1:
        _series(WORKER_RETRIES, worker, "recovered" if reply.error is None else "exhausted").inc(
            reply.attempts - 1
        )
    if not reply.cached:
        for reason, n in reply.faults.items():
            _series(WORKER_FAULTS, worker, reason if reason in _FAULT_REASONS else "other").inc(n)
    if req.cache:
        _series(CACHE_HITS if reply.cached else CACHE_MISSES, worker).inc()
    if reply.usage.input_tokens:
        _series(TOKENS, worker, "input").inc(reply.usage.input_tokens)
    if reply.usage.output_tokens:
        _series(TOKENS, worker, "output").inc(reply.usage.output_tokens)
    if reply.usage.cost_usd:
        _series(COST, worker).inc(reply.usage.cost_usd)


def verified(verdicts: Sequence[Verdict], seconds: float) -> None:
    for v in verdicts:
        _series(VERDICTS, str(v.outcome)).inc()
    _series(STAGE_LATENCY, "verify").observe(seconds)


# The gateway (services/gateway): per API key, labelled by the key's configured name (bounded by the keys file),
# never by the key itself.
GATEWAY_REQUESTS = _counter(
    "conductor_gateway_requests",
    "Gateway requests by key, HTTP status and whether streamed.",
    ["key", "status", "stream"],
)
GATEWAY_TOKENS = _counter(
    "conductor_gateway_tokens", "Tokens spent for each gateway key.", ["key", "direction"]
)
GATEWAY_COST = _counter("conductor_gateway_cost_usd", "Dollars spent for each gateway key.", ["key"])
GATEWAY_CALLS = _counter("conductor_gateway_worker_calls", "Worker calls made for each gateway key.", ["key"])
GATEWAY_DISCONNECTS = _counter(
    "conductor_gateway_client_disconnects", "Clients that went away before their answer was sent.", ["key"]
)
GATEWAY_IN_FLIGHT = Gauge(
    "conductor_gateway_in_flight", "Gateway requests waiting on a task right now.", registry=REGISTRY
)


def gateway_request(key: str, status: int, stream: bool) -> None:
    _series(GATEWAY_REQUESTS, key, str(status), "true" if stream else "false").inc()


def gateway_usage(key: str, usage: Usage) -> None:
    if usage.input_tokens:
        _series(GATEWAY_TOKENS, key, "input").inc(usage.input_tokens)
    if usage.output_tokens:
        _series(GATEWAY_TOKENS, key, "output").inc(usage.output_tokens)
    if usage.cost_usd:
        _series(GATEWAY_COST, key).inc(usage.cost_usd)
    if usage.calls:
        _series(GATEWAY_CALLS, key).inc(usage.calls)


# Policy versions (services/planner/versions.py): which one a planner's local backend serves, and every attempt to
# load one. The info's labels are replaced on each load (one series), outcomes are VersionError reasons.
POLICY_VERSION = Info(
    "conductor_policy_version",
    "The policy version the planner's local backend serves: its name, base fingerprint and object sha256 "
    "(version empty: the base model, with CONDUCTOR_POLICY_ADAPTER if set).",
    registry=REGISTRY,
)
POLICY_VERSION_LOADS = _counter(
    "conductor_policy_version_loads",
    "Policy versions a planner tried to load: ok, or the reason it refused one (missing, too_large, corrupt, "
    "wrong_base, unavailable, load_failed).",
    ["outcome"],
)


def policy_version_served(version: str, base: str, sha256: str) -> None:
    POLICY_VERSION.info({"version": version, "base": base, "sha256": sha256})


def policy_version_load(outcome: str) -> None:
    _series(POLICY_VERSION_LOADS, outcome).inc()


# The learner (services/learner/app.py): the job it runs, from the progress it already reports (pipeline.py's
# ``(stage, step, total, figures)``) and the rollouts it has scored. ``run`` is the job config's ``name``, chosen by
# the operator who submits jobs (the NATS user ``trainer``), so bounded like the jobs themselves; stages are the
# pipeline's fixed names. Gauges keep a finished job's last values: the panel shows where each run ended.
LEARNER_STEP = Gauge(
    "conductor_learner_step",
    "The step a training stage has reached (GRPO and SFT: optimizer steps; a measured stage: 1 when measured).",
    ["run", "stage"],
    registry=REGISTRY,
)
LEARNER_STEPS = Gauge(
    "conductor_learner_steps",
    "The steps a training stage will take in all (its step counter's end).",
    ["run", "stage"],
    registry=REGISTRY,
)
LEARNER_REWARD = Gauge(
    "conductor_learner_reward",
    "Mean reward of the rollouts of the last logged GRPO step (TRL's ``reward``).",
    ["run"],
    registry=REGISTRY,
)
LEARNER_HELD_OUT = Gauge(
    "conductor_learner_held_out_reward",
    "Mean reward on the run's held-out questions, measured after a stage (base, sft, after_grpo, adapter, ...).",
    ["run", "stage"],
    registry=REGISTRY,
)
LEARNER_ROLLOUTS = _counter(
    "conductor_learner_rollouts",
    "Rollouts the learner had scored over NATS, by outcome: rewarded, unparsed (the completion was no workflow: "
    "reward 0) or masked (an infrastructure error left the reward unknown; the trainer ignores it).",
    ["run", "outcome"],
)
LEARNER_JOBS = _counter(
    "conductor_learner_jobs",
    "Training jobs the learner ended, by outcome (ok or the error code).",
    ["outcome"],
)


def learner_progress(run: str, stage: str, step: int, total: int, figures: Mapping[str, Any]) -> None:
    """One progress report of a running job, with the pipeline's figures as it reports them (a measured stage's
    ``held_out`` is ``evaluate.held_out_reward``'s summary); called from the training thread (prometheus_client
    locks)."""
    _series(LEARNER_STEP, run, stage).set(step)
    _series(LEARNER_STEPS, run, stage).set(total)
    reward = figures.get("reward")
    if stage == "grpo" and isinstance(reward, int | float):
        _series(LEARNER_REWARD, run).set(reward)
    held_out = figures.get("held_out")
    mean = held_out.get("reward_mean") if isinstance(held_out, Mapping) else None
    if isinstance(mean, int | float):
        _series(LEARNER_HELD_OUT, run, stage).set(mean)


def learner_rollouts(run: str, results: Sequence[RolloutResult]) -> None:
    """The results of one scoring call, each counted by its outcome."""
    for r in results:
        _series(
            LEARNER_ROLLOUTS,
            run,
            "unparsed" if not r.parsed else "masked" if r.reward is None else "rewarded",
        ).inc()


def learner_job_finished(error: ErrorInfo | None) -> None:
    _series(LEARNER_JOBS, outcome(error)).inc()
