"""Cancelling running tasks (issue 19, item 3): a ``CancelRequest`` on ``conductor.cancel.<tenant>.<task_id>``
(schemas/solve.py ``CANCEL``) stops that tenant's task of that id.

Only the tenant may publish on its subjects (conductor/access.py), so who sent a cancel is read from the subject,
never from the payload; a task's tenant is the subject it was sent on (issue 19, item 4), so a tenant cancels its
own tasks and nobody else's, whatever ids they chose (``SolveRequest.owner`` is ignored). Every executor replica
hears every cancel (no queue group): the one running the task marks it, and the task starts no further plan or
worker call (``_TaskRun._halt``); the call already running finishes and is paid for, and the result carries it.
A cancel that finds no running task is remembered for ``REMEMBER_S`` (a durable task still queued, a solve still
waiting for a slot), so the task stops before its first call when it starts.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import CANCEL_SUBJECT_PREFIX, SolveRequest

REMEMBER_S = 600.0  # the gateway's default solve timeout: it stops repeating a cancel after that
REMEMBER_MAX = 10_000  # cancels remembered at once per tenant; a tenant's oldest are forgotten first
"""Per tenant (issue 34): one tenant's flood of cancels for tasks it never runs forgets only its own. Tenants are
NATS users (conductor/access.py): a deployment's few, not a number a sender can grow."""


class Cancel:
    """One running task's cancellation: set once, by its tenant."""

    __slots__ = ("reason",)

    def __init__(self) -> None:
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason or "no reason given"

    def error(self) -> ErrorInfo | None:
        if self.reason is None:
            return None
        message = f"cancelled by its owner ({self.reason}); no further calls made"
        return ErrorInfo(code=ErrorCode.CANCELLED, message=message)


def parse_subject(subject: str, prefix: str) -> tuple[str, str] | None:
    """(tenant, task_id) of a cancel subject under ``prefix``; None for anything else. Task ids may hold dots."""
    head = prefix + CANCEL_SUBJECT_PREFIX + "."
    if not subject.startswith(head):
        return None
    tenant, _, task_id = subject.removeprefix(head).partition(".")
    return (tenant, task_id) if tenant and task_id else None


class Cancels:
    """The cancellable tasks running in this executor, and recent cancels that found none."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._running: dict[tuple[str, str], list[Cancel]] = {}
        # tenant -> task id -> (until when, reason), oldest first
        self._asked: dict[str, collections.OrderedDict[str, tuple[float, str]]] = {}

    def watch(self, tenant: str | None, req: SolveRequest) -> _Watching:
        """``with cancels.watch(tenant, req) as cancel``: the cancellation of ``tenant``'s ``req`` while it runs (one
        that can never be set without a tenant or an id: nobody could name the task)."""
        return _Watching(self, tenant, req.task_id)

    def cancel(self, tenant: str, task_id: str, reason: str) -> bool:
        """Mark the tenant's running task ``task_id`` cancelled; True if one runs here, else remember the cancel."""
        running = self._running.get((tenant, task_id))
        if running:
            for cancel in running:
                cancel.set(reason)
            return True
        asked = self._asked.setdefault(tenant, collections.OrderedDict())
        asked[task_id] = (self._clock() + REMEMBER_S, reason)
        asked.move_to_end(task_id)
        while len(asked) > REMEMBER_MAX:
            asked.popitem(last=False)
        return False

    def remembered(self, tenant: str) -> int:
        """How many of ``tenant``'s cancels are remembered (a test and a debugging aid)."""
        return len(self._asked.get(tenant, ()))

    def _enter(self, key: tuple[str, str], cancel: Cancel) -> None:
        asked = self._forget(*key)
        if asked is not None and asked[0] > self._clock():
            cancel.set(asked[1])
        self._running.setdefault(key, []).append(cancel)

    def _leave(self, key: tuple[str, str], cancel: Cancel) -> None:
        running = self._running[key]
        running.remove(cancel)
        if not running:
            del self._running[key]

    def _forget(self, tenant: str, task_id: str) -> tuple[float, str] | None:
        asked = self._asked.get(tenant)
        if asked is None:
            return None
        found = asked.pop(task_id, None)
        if not asked:
            del self._asked[tenant]
        return found


class _Watching:
    """``Cancels.watch``: a context manager of its own rather than a generator's, as every task in flight holds
    one for its whole run (a generator and its frame weigh several times these three slots)."""

    __slots__ = ("_cancel", "_cancels", "_key")

    def __init__(self, cancels: Cancels, tenant: str | None, task_id: str | None) -> None:
        self._cancels = cancels
        self._key = (tenant, task_id) if tenant and task_id is not None else None
        self._cancel = Cancel()

    def __enter__(self) -> Cancel:
        if self._key is not None:
            self._cancels._enter(self._key, self._cancel)
        return self._cancel

    def __exit__(self, *exc: object) -> None:
        if self._key is not None:
            self._cancels._leave(self._key, self._cancel)
