"""Durable intake on JetStream: the task stream, checkpoints, results and dead letters.

Every task belongs to a tenant, the NATS user that submitted it, named by the subject it was submitted on (only
that user may publish there, conductor/access.py); its state is keyed ``<tenant>.<task_id>`` (``task_key``), so
tenants never share a task, and each may read only its own keys (docs/tenancy.md).

- Publish a ``SolveRequest`` JSON (with ``task_id`` set) to ``conductor.tasks.submit.<tenant>`` on the
  ``CONDUCTOR_TASKS`` work-queue stream with the header ``Nats-Msg-Id: <tenant>.<task_id>``; JetStream drops
  duplicates within the window.
- The final ``SolveResult`` is stored in the KV bucket ``CONDUCTOR_RESULTS`` under ``<tenant>.<task_id>`` and
  published to ``conductor.results.<tenant>.<task_id>`` (stream ``CONDUCTOR_RESULT_EVENTS``, also deduplicated).
- The executor checkpoints a ``TaskCheckpoint`` in ``CONDUCTOR_CHECKPOINTS`` after every step; a redelivered task
  resumes from it.
- A task that keeps failing transiently past ``max_deliver`` gets a ``DeadLetter`` on
  ``conductor.dead.<tenant>.<task_id>`` (stream ``CONDUCTOR_DEAD``) and a final result carrying the error.
"""

from __future__ import annotations

import msgspec

from schemas import SCHEMA_VERSION
from schemas.contract import Event
from schemas.errors import ErrorInfo
from schemas.learner import JOBS_STREAM
from schemas.plan import PriorRound, Workflow
from schemas.rollout import ROLLOUTS_STREAM
from schemas.solve import RoundRecord, SolveRequest, SolveResult
from schemas.usage import Usage

TASKS_STREAM = "CONDUCTOR_TASKS"
SUBMIT_SUBJECT = "conductor.tasks.submit"
RESULTS_BUCKET = "CONDUCTOR_RESULTS"
RESULT_EVENTS_STREAM = "CONDUCTOR_RESULT_EVENTS"
RESULT_SUBJECT_PREFIX = "conductor.results"
CHECKPOINTS_BUCKET = "CONDUCTOR_CHECKPOINTS"
DEAD_STREAM = "CONDUCTOR_DEAD"
DEAD_SUBJECT_PREFIX = "conductor.dead"
GATEWAY_QUOTA_BUCKET = "CONDUCTOR_GATEWAY_QUOTA"  # per-key rate and spend records of the HTTP gateway
INTAKE_CONSUMER = (
    "executor"  # the executors' durable pull consumer on the tasks stream (lag: `conductor status`)
)
CALLS_BUCKET = (
    "CONDUCTOR_CALLS"  # the worker-adapter's call ledger: idempotency records by (task, round, step)
)
CACHE_BUCKET = "CONDUCTOR_CACHE"  # the worker-adapter's content-addressed worker-call cache
LIMITS_BUCKET = "CONDUCTOR_LIMITS"  # the worker-adapter's back-pressure record per worker (cooldowns, slots)
POLICIES_BUCKET = "CONDUCTOR_POLICIES"  # the learner's Object Store of policy versions (issue 12)


def task_key(tenant: str, task_id: str) -> str:
    """A task's name in the deployment: its results key, checkpoint key, dead letter's and result event's subject
    tail, deduplication id and worker-call ledger id. Task ids are the tenant's to choose; two tenants' equal ids
    are two tasks."""
    return f"{tenant}.{task_id}"


def result_subject(tenant: str, task_id: str) -> str:
    return f"{RESULT_SUBJECT_PREFIX}.{task_key(tenant, task_id)}"


RESULTS: Event[SolveResult] = Event(
    title="results",
    address=RESULT_SUBJECT_PREFIX + ".{tenant}.{task_id}",
    payload=SolveResult,
    description="The final result of a durable task, once per task (JetStream stream CONDUCTOR_RESULT_EVENTS, "
    "deduplicated by <tenant>.<task_id>); also stored in the KV bucket CONDUCTOR_RESULTS under <tenant>.<task_id>. "
    "Only the task's tenant may subscribe here or read that key.",
    parameters={
        "tenant": "The task's tenant (the NATS user that submitted it).",
        "task_id": "The task's id.",
    },
)


def dead_subject(key: str) -> str:
    """The dead letter of the task ``key`` (``task_key``)."""
    return f"{DEAD_SUBJECT_PREFIX}.{key}"


CHECKPOINT_VERSION = SCHEMA_VERSION
"""What the store writes into ``TaskCheckpoint.schema_version``."""


class TaskCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """Everything needed to resume a task without repeating finished worker calls.

    ``rounds`` holds the finished rounds plus, last, the round in progress with the steps finished so far;
    ``workflow`` is that round's plan (so the planner is not asked again) or None between rounds.
    """

    task_id: str
    request: SolveRequest
    rounds: list[RoundRecord] = []
    workflow: Workflow | None = None
    previous: list[PriorRound] = []
    answer: str | None = None
    spent: Usage = Usage()  # worker + planner usage so far, for budgets across restarts
    wall_s: float = 0.0  # wall time spent in earlier deliveries, for max_wall_s across restarts
    deliveries: int = 1
    errors: list[
        ErrorInfo
    ] = []  # transient failures of earlier deliveries, oldest first (for the dead letter)
    # Unix seconds: when the task's first delivery started (max_wall_s and latency_s count from here across
    # redeliveries), and when its current run of transient failures began (the retry horizon counts from here;
    # None while the task is not failing; reset when a failed delivery had made progress).
    started_at: float | None = None
    failing_since: float | None = None
    failing_progress: int = 0  # finished plans + steps when ``failing_since`` was set
    # The format version of the executor that last stored it (the store stamps it on every save); absent in
    # checkpoints stored before version 3, which therefore read as 2.
    schema_version: int = 2


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    request: SolveRequest
    attempts: int
    errors: list[ErrorInfo]  # the error chain, one per failed delivery, oldest first


class Names(msgspec.Struct, frozen=True, kw_only=True):
    """Concrete stream, bucket and subject names for a subject prefix (tests, tenants): subjects get the prefix,
    stream and bucket names a suffix derived from it, so separate prefixes never share state."""

    tasks_stream: str
    submit_subject: str  # the root: a tenant submits on ``submit(tenant)``
    results_bucket: str
    result_events_stream: str
    result_prefix: str
    checkpoints_bucket: str
    dead_stream: str
    dead_prefix: str
    gateway_quota_bucket: str = GATEWAY_QUOTA_BUCKET
    calls_bucket: str = CALLS_BUCKET
    cache_bucket: str = CACHE_BUCKET
    limits_bucket: str = LIMITS_BUCKET
    policies_bucket: str = POLICIES_BUCKET
    learner_jobs_stream: str = JOBS_STREAM
    rollouts_stream: str = ROLLOUTS_STREAM

    @classmethod
    def for_prefix(cls, prefix: str) -> Names:
        tag = "".join(c if c.isalnum() else "_" for c in prefix.strip(".")).upper()
        suffix = f"_{tag}" if tag else ""
        return cls(
            tasks_stream=TASKS_STREAM + suffix,
            submit_subject=prefix + SUBMIT_SUBJECT,
            results_bucket=RESULTS_BUCKET + suffix,
            result_events_stream=RESULT_EVENTS_STREAM + suffix,
            result_prefix=prefix + RESULT_SUBJECT_PREFIX,
            checkpoints_bucket=CHECKPOINTS_BUCKET + suffix,
            dead_stream=DEAD_STREAM + suffix,
            dead_prefix=prefix + DEAD_SUBJECT_PREFIX,
            gateway_quota_bucket=GATEWAY_QUOTA_BUCKET + suffix,
            calls_bucket=CALLS_BUCKET + suffix,
            cache_bucket=CACHE_BUCKET + suffix,
            limits_bucket=LIMITS_BUCKET + suffix,
            policies_bucket=POLICIES_BUCKET + suffix,
            learner_jobs_stream=JOBS_STREAM + suffix,
            rollouts_stream=ROLLOUTS_STREAM + suffix,
        )

    def submit(self, tenant: str) -> str:
        """Where ``tenant`` submits durable tasks."""
        return f"{self.submit_subject}.{tenant}"

    def submitter(self, subject: str) -> str | None:
        """The tenant a task was submitted by, from the subject it arrived on; None for any other subject."""
        tenant = subject.removeprefix(self.submit_subject + ".")
        return tenant if tenant != subject and "." not in tenant else None

    def result_subject(self, tenant: str, task_id: str) -> str:
        return f"{self.result_prefix}.{task_key(tenant, task_id)}"

    def dead_subject(self, key: str) -> str:
        return self.dead_prefix + dead_subject(key).removeprefix(DEAD_SUBJECT_PREFIX)
