"""Learner subjects: training jobs in (durable), progress out, policy versions announced (docs/learner.md).

A job is the TOML text of a learner config (services/learner/config.py) — the same file `conductor train --config`
reads — so a job on the bus and a run on a terminal train identically. Jobs go to a JetStream work-queue stream and
are taken by the learner's durable consumer one at a time (a learner owns its accelerators); a job whose learner
dies is redelivered and resumes from its last checkpoint. Progress is a plain event per job.

A policy version is a peft LoRA adapter directory on a base model, packed as one object in the JetStream Object
Store bucket ``CONDUCTOR_POLICIES`` (schemas.tasks.POLICIES_BUCKET) with its ``PolicyVersion`` as the object's
description, then announced with the same ``PolicyVersion`` on ``conductor.learner.policy.<run>``
(conductor/policy_versions.py packs, stores and verifies; the planner's local backend hot-loads it).
"""

from __future__ import annotations

from typing import Annotated, Literal

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


POLICY_SUBJECT_PREFIX = "conductor.learner.policy"

Sha256 = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]


PromptStyle = Literal["examples", "rules", "task"]
"""conductor/prompt.py PROMPT_STYLES: rules and few-shot examples, rules only, or the user turn only."""


class PolicyCard(msgspec.Struct, frozen=True, kw_only=True):
    """How a trained policy must be served: what it was trained on, travelling with its weights (the adapter's
    ``conductor-policy.json`` and ``PolicyVersion.card``). A planner serving the weights adopts it, and refuses a
    setting that contradicts it — a policy sampled with another prompt or temperature than it learned on is another
    policy (issue 18, item 2)."""

    prompt: PromptStyle
    show_domain: bool = True  # the prompt's "Answer type:" line
    # Schema 13: recursion rounds after the first it was trained to take (issue 33: it decides from the first round's
    # results whether to hand back or escalate). A planner serving it says so in every reply (``PlanReply.rounds``)
    # and the executor runs them even when a request asks for fewer; a request may ask for more.
    rounds: Annotated[int, Meta(ge=0, le=4)] = 0
    # Schema 13: how much of an earlier round's final response a recursion prompt shows (conductor/prompt.py); 0
    # shows none, only each step's final answer. A policy is served with the length it was trained on.
    response_chars: Annotated[int, Meta(ge=0, le=100_000)] = 8_000
    max_steps: Annotated[int, Meta(ge=1, le=10)] = 5
    temperature: Annotated[float, Meta(ge=0, le=5)] = 1.0
    max_tokens: Annotated[int, Meta(ge=1, le=32768)] = 1024
    base: Annotated[
        str, Meta(pattern=r"^(sha256:[0-9a-f]{64})?$", description="The base model's fingerprint.")
    ] = ""
    trained_by: str = ""  # the run (its preset name) that made the weights, for people
    # The one worker view it was trained on (conductor/prompt.py ``view_fingerprint``), when it was trained on one
    # fixed view: a pointer into that numbering is all it knows, so a planner serves it on that view only and plans
    # any other with its fallback baseline (recorded as the fallback's cause). Empty: trained on varied views.
    view: Annotated[
        str,
        Meta(
            pattern=r"^(sha256:[0-9a-f]{64})?$",
            description="The worker view it was trained on; empty: any view.",
        ),
    ] = ""
    # Trained on varied views (``view`` empty): the workers those views were drawn from, one fingerprint each
    # (conductor/prompt.py ``worker_fingerprint``: the worker as the Conductor reads it, without its number). A
    # planner serves the policy on a view of those workers only — any subset, in any numbering — and plans a view
    # with a worker it never read about with its fallback baseline. Empty: any worker.
    workers: Annotated[
        list[Annotated[str, Meta(pattern=r"^sha256:[0-9a-f]{64}$")]],
        Meta(description="The workers its training views were drawn from; empty: any."),
    ] = []
    # How its training questions were worded: ``harness``, each carrying its family's answer-format instruction, as
    # every task registry entry presents them (tasks/formats.py) — a planner shows a request's question so too when
    # it asks for no answer marker; ``as_asked``, as the user wrote it.
    questions: Annotated[
        Literal["harness", "as_asked"],
        Meta(
            description="How its training questions were worded: with their answer-format instruction, or not."
        ),
    ] = "harness"


class PolicyVersion(msgspec.Struct, frozen=True, kw_only=True):
    """One policy version: what the Object Store keeps beside the packed adapter and what the announcement says.

    ``base`` is the fingerprint of the base model's weights (conductor/policy_versions.py ``fingerprint``): a
    planner applies the adapter only to a base with the same fingerprint. ``sha256`` and ``size`` are the packed
    object's, checked after every download."""

    version: Annotated[
        str,
        Meta(
            min_length=3,
            max_length=256,
            pattern=r"^.+@\d+$",
            description="`<run>@<step>`: the name rollouts record as their policy_version.",
        ),
    ]
    run: Annotated[str, Meta(min_length=1, max_length=200)]
    step: Annotated[int, Meta(ge=0)]
    object: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=256,
            pattern=r"^[-/_=.A-Za-z0-9]+$",
            description="The object's name in the bucket.",
        ),
    ]
    base: Annotated[str, Meta(pattern=r"^sha256:[0-9a-f]{64}$", description="The base model's fingerprint.")]
    base_name: str = ""  # where the learner's base model came from (a path or model id), for people
    sha256: Sha256
    size: Annotated[int, Meta(ge=0, description="Bytes of the packed object.")]
    created: Annotated[float, Meta(description="Unix seconds at publication.")]
    format: Literal["peft-lora"] = (
        "peft-lora"  # a tar of a peft adapter directory (adapter_config.json + weights)
    )
    rank: int | None = None
    card: PolicyCard | None = None  # schema 6: how to serve it; None for a version published before cards


POLICY_VERSIONS: Event[PolicyVersion] = Event(
    title="policy-versions",
    address=POLICY_SUBJECT_PREFIX + ".{run}",
    payload=PolicyVersion,
    description="A new policy version (learner -> planners): the packed adapter is already in the Object Store "
    "bucket CONDUCTOR_POLICIES under `object`; a planner watching versions downloads it, checks its sha256 and base "
    "fingerprint and hot-loads it.",
    parameters={
        "run": "The run's name as one subject token (characters other than letters, digits, - and _ "
        "become _)."
    },
)
