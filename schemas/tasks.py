"""Durable intake on JetStream: the task stream, checkpoints, results and dead letters.

- Publish a ``SolveRequest`` JSON (with ``task_id`` set) to ``conductor.tasks.submit`` on the ``CONDUCTOR_TASKS``
  work-queue stream with the header ``Nats-Msg-Id: <task_id>``; JetStream drops duplicates within the window.
- The final ``SolveResult`` is stored in the KV bucket ``CONDUCTOR_RESULTS`` under the task id and published to
  ``conductor.results.<task_id>`` (stream ``CONDUCTOR_RESULT_EVENTS``, also deduplicated by task id).
- The executor checkpoints a ``TaskCheckpoint`` in ``CONDUCTOR_CHECKPOINTS`` after every step; a redelivered task
  resumes from it.
- A task that keeps failing transiently past ``max_deliver`` gets a ``DeadLetter`` on ``conductor.dead.<task_id>``
  (stream ``CONDUCTOR_DEAD``) and a final result carrying the error.
"""

from __future__ import annotations

import msgspec

from schemas import SCHEMA_VERSION
from schemas.contract import Event
from schemas.errors import ErrorInfo
from schemas.learner import JOBS_STREAM
from schemas.plan import PriorRound, Workflow
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
INTAKE_CONSUMER = "executor"  # the executors' durable pull consumer on the tasks stream (lag: `conductor status`)
CALLS_BUCKET = "CONDUCTOR_CALLS"  # the worker-adapter's call ledger: idempotency records by (task, round, step)
CACHE_BUCKET = "CONDUCTOR_CACHE"  # the worker-adapter's content-addressed worker-call cache
LIMITS_BUCKET = "CONDUCTOR_LIMITS"  # the worker-adapter's back-pressure record per worker (cooldowns, slots)
POLICIES_BUCKET = "CONDUCTOR_POLICIES"  # the learner's Object Store of policy versions (issue 12)


def result_subject(task_id: str) -> str:
    return f"{RESULT_SUBJECT_PREFIX}.{task_id}"


RESULTS: Event[SolveResult] = Event(
    title="results",
    address=RESULT_SUBJECT_PREFIX + ".{task_id}",
    payload=SolveResult,
    description="The final result of a durable task, once per task (JetStream stream CONDUCTOR_RESULT_EVENTS, "
    "deduplicated by task id); also stored in the KV bucket CONDUCTOR_RESULTS under the task id.",
    parameters={"task_id": "The task's id."},
)


def dead_subject(task_id: str) -> str:
    return f"{DEAD_SUBJECT_PREFIX}.{task_id}"


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
    errors: list[ErrorInfo] = []  # transient failures of earlier deliveries, oldest first (for the dead letter)
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
    submit_subject: str
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
        )

    def result_subject(self, task_id: str) -> str:
        return self.result_prefix + result_subject(task_id).removeprefix(RESULT_SUBJECT_PREFIX)

    def dead_subject(self, task_id: str) -> str:
        return self.dead_prefix + dead_subject(task_id).removeprefix(DEAD_SUBJECT_PREFIX)
