"""The wire contract between Conductor services: msgspec Structs with their subject names beside them.

Nothing here does I/O. Every service and every client speaks only these types.

Schema evolution rules (checked by the golden-payload tests in tests/schemas):
1. ``SCHEMA_VERSION`` is bumped on every change to a payload; old payloads must still decode.
2. A new field always has a default, so messages written before it existed still decode.
3. A field's type never changes and a field is never renamed; add a new field and deprecate the old one.
4. Unknown fields are ignored on decode (msgspec's default), so newer producers can talk to older consumers.
5. Tagged unions gain variants only; a tag value is never reused for a different shape.
6. Enumerated string values (error codes, outcomes) gain members only.
"""

SCHEMA_VERSION = 14
"""2: ``WorkReply.faults`` (failed tries by ``FaultReason``), ``SolveRequest.progress``; ``WorkRequest.idempotent``
also landed after the v1 golden payloads.
3: ``TaskCheckpoint.schema_version`` (stored checkpoints carry their format version, as results do) and its
``started_at``/``failing_since``/``failing_progress`` (the retry horizon across redeliveries); bounds on
request fields (``msgspec.Meta``: non-blank question, ``max_steps`` >= 1, positive budget limits, ...) that the
services already enforced by hand, so every payload they accepted still decodes.
4: the rollout subject (``schemas/rollout.py``: ``RolloutBatch`` in, ``RolloutBatchResult`` out).
5: the learner's subjects in the catalog (``schemas/learner.py``: ``TrainJob``, ``TrainProgress``) and policy
versions (``PolicyVersion``, announced on ``conductor.learner.policy.<run>``).
6: ``PolicyVersion.card`` (``PolicyCard``: how the version must be served; issue 18).
7: why a fallback planned (issue 19): ``PlanReply.rejected`` and ``RoundRecord.rejected`` (``RejectedSample``: each
unusable policy sample's reason and text), ``RoundRecord.policy_error`` (the backend's failure).
8: cancelling a task (issue 19, item 3): ``SolveRequest.owner``, ``CancelRequest`` on ``conductor.cancel.<owner>.
<task_id>``, the error code ``cancelled``.
9: tenants (issue 19, item 4; docs/tenancy.md): every subject of the public API names the tenant, the NATS user
that sends on it — ``conductor.solve.<tenant>``, ``conductor.tasks.submit.<tenant>``, ``conductor.progress.<tenant>.
<task_id>``, ``conductor.results.<tenant>.<task_id>``, ``conductor.cancel.<tenant>.<task_id>`` — and a task's
stored result, checkpoint and dead letter are keyed ``<tenant>.<task_id>``. No payload changed; ``SolveRequest.
owner`` is ignored (a task's tenant cancels it). A client of schema 8 must move to the tenant's subjects.
10: rollouts placed by load (issue 18, item 8): ``RolloutItem`` on ``conductor.rollout.work.<run>`` (the work queue
``CONDUCTOR_ROLLOUTS``, pulled by executors with free slots) and ``RolloutOutcome`` on ``conductor.rollout.results.
<run>``; the batch subject ``conductor.rollout`` is unchanged.
11: ``PolicyCard.workers`` (issue 18, stage 2): a policy trained on varied views names the workers they were drawn
from, and is served on views of those workers only.
12: ``PolicyCard.questions`` (issue 18, item 6): a policy trained on registry questions, each carrying its answer-format
instruction (``harness``, the default), is shown a user's question with that instruction added when it has none.
13: ``PriorRound.answers`` (issue 33, item 5): a recursion round shows each earlier step's final answer compactly
(``StepAnswer``), so the Conductor can hand back when they agree and escalate when they do not. Also stores that check
what they read (issue 34, item 2): ``SolveResult.tenant``/``key`` (written by the executor; a reader treats a result
naming another tenant or key as absent), ``SolveRequest.key`` (the gateway's API key name, echoed),
``CancelRequest.tenant``; ``CancelRequest`` refuses unknown fields (an exception to rule 4: a foreign message aimed
at a cancel subject must not decode as a cancel).
14: ``Rollout.request`` (issue 35, item 5): a rollout carries the ``SolveRequest`` it amounts to instead of re-declaring
seven of its fields; ``question``, ``pool`` and ``reference`` at the top level became optional (``UNSET``), so a rollout
is given in one form or the other, never both (refused on decode). Rollouts of schema 13 still decode and score the
same; an executor of schema 13 refuses a rollout of schema 14 (no ``question``): upgrade the executors first."""
