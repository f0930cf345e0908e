"""Learner subjects: training jobs in (durable), progress out (docs/learner.md).

A job is the TOML text of a learner config (services/learner/config.py) — the same file `conductor train --config`
reads — so a job on the bus and a run on a terminal train identically. Jobs go to a JetStream work-queue stream and
are taken by the learner's durable consumer one at a time (a learner owns its accelerators); a job whose learner
dies is redelivered and resumes from its last checkpoint. Progress is a plain event per job.

Not yet in ``schemas.catalog`` (nor the AsyncAPI document, nor conductor/access.py's learner grant): see
docs/learner.md, "Integration left".
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from schemas.contract import Event
from schemas.errors import ErrorInfo

TRAIN_SUBJECT = "conductor.learner.train"
"""JetStream work queue (stream ``CONDUCTOR_LEARNER_JOBS``): ``TrainJob`` messages, deduplicated by job id."""

JOBS_STREAM = "CONDUCTOR_LEARNER_JOBS"
JOBS_CONSUMER = "learner"

JobId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]*$")]


class TrainJob(msgspec.Struct, frozen=True, kw_only=True):
    job_id: JobId
    config: Annotated[str, Meta(min_length=1, description="A learner config file's TOML text.")]
    output_dir: Annotated[str | None, Meta(description="Overrides the config's output.dir.")] = None


class TrainProgress(msgspec.Struct, frozen=True, kw_only=True):
    """One stage's progress: ``step`` of ``total`` and its latest figures (numbers only: reward, loss, parse rate)."""

    job_id: str
    stage: str
    step: int = 0
    total: int = 0
    figures: dict[str, float] = {}
    done: bool = False  # the job finished (successfully when error is None)
    error: ErrorInfo | None = None


LEARNER_PROGRESS: Event[TrainProgress] = Event(
    title="learner-progress",
    address="conductor.learner.progress.{job_id}",
    payload=TrainProgress,
    description="A training job's progress (learner -> anyone): per stage and GRPO step, then a final done event.",
    parameters={"job_id": "The job's id."},
)
