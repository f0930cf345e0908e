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

from schemas.errors import ErrorInfo
from schemas.plan import PriorRound, Workflow
from schemas.solve import RoundRecord, SolveRequest
from schemas.usage import Usage

TASKS_STREAM = "CONDUCTOR_TASKS"
SUBMIT_SUBJECT = "conductor.tasks.submit"
RESULTS_BUCKET = "CONDUCTOR_RESULTS"
RESULT_EVENTS_STREAM = "CONDUCTOR_RESULT_EVENTS"
RESULT_SUBJECT_PREFIX = "conductor.results"
CHECKPOINTS_BUCKET = "CONDUCTOR_CHECKPOINTS"
DEAD_STREAM = "CONDUCTOR_DEAD"
DEAD_SUBJECT_PREFIX = "conductor.dead"


def result_subject(task_id: str) -> str:
    return f"{RESULT_SUBJECT_PREFIX}.{task_id}"


def dead_subject(task_id: str) -> str:
    return f"{DEAD_SUBJECT_PREFIX}.{task_id}"


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


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    task_id: str
    request: SolveRequest
    attempts: int
    errors: list[ErrorInfo]  # the error chain, one per failed delivery, oldest first
