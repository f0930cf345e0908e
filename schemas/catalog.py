"""Every subject of the system, in two lists: what the AsyncAPI document and the contract tests walk.

Adding a request/reply subject: declare its ``RequestReply`` beside its payloads in its ``schemas/`` module, list it
in ``REQUEST_REPLY``, and serve it from its service with ``conductor.endpoints.serve(CONTRACT, handler, ...)``;
requesters call ``Requester.call(CONTRACT, request, ...)``. Adding a published subject: declare its ``Event`` and
list it in ``EVENTS``.
"""

from __future__ import annotations

from schemas.contract import Event, RequestReply
from schemas.learner import LEARNER_PROGRESS, POLICY_VERSIONS
from schemas.plan import PLAN
from schemas.rollout import ROLLOUT, ROLLOUT_RESULTS, ROLLOUT_WORK
from schemas.solve import CANCEL, PROGRESS, SOLVE
from schemas.tasks import RESULTS
from schemas.verify import VERIFY
from schemas.work import WORK

REQUEST_REPLY: tuple[RequestReply, ...] = (SOLVE, ROLLOUT, PLAN, WORK, VERIFY)
"""Ordered as the AsyncAPI document lists them: the public subject first, the learner's next, then the internal
ones."""

EVENTS: tuple[Event, ...] = (
    PROGRESS,
    RESULTS,
    CANCEL,
    ROLLOUT_WORK,
    ROLLOUT_RESULTS,
    LEARNER_PROGRESS,
    POLICY_VERSIONS,
)
"""Subjects published to without a reply."""
