"""Small asyncio helpers the services share: stopping helper tasks, timeouts a busy loop cannot trip."""

from __future__ import annotations

import asyncio
from types import TracebackType

import structlog

log = structlog.get_logger("conductor.aio")


async def stop_task(task: asyncio.Task[object], *, timeout: float, what: str) -> bool:
    """Cancel a helper task (a heartbeat, a lease renewal) and wait at most ``timeout`` seconds for it to end.

    Never wait unboundedly: a cancel that lands inside a client library's request can be swallowed (Python 3.11's
    ``asyncio.wait_for`` and nats-py's flush both can), and a caller awaiting such a task would wait forever. The
    task's loop must therefore also watch a flag of its own. Returns False (and logs) when it had not ended yet.
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        log.warning("helper task did not stop when cancelled; its loop ends at its next step", what=what)
    return bool(done)


LOOP_LATE_S = 0.05
"""A timer that comes round later than this found our own event loop busy elsewhere."""


def longest_wait(seconds: float, grace_s: float | None = None) -> float:
    """The most ``answer_timeout(seconds, grace_s=...)`` waits: what a client library's own timer (an SDK's
    request timeout) under it is set to, a backstop that must not fire first."""
    return seconds + (seconds if grace_s is None else grace_s)


class answer_timeout:  # lower case: used as ``async with answer_timeout(...)``, like ``asyncio.timeout``
    """``asyncio.timeout(seconds)`` for an answer from outside the process, in which our own busy loop does not
    count against the other side: it waits at most ``longest_wait(seconds, grace_s)`` (``grace_s`` defaults to
    ``seconds``), and exactly ``seconds`` on a loop that keeps time.

    A starved loop (a CPU-bound machine) runs its timers late, and an answer that arrived in time can still be
    waiting to be read when the deadline comes round; a plain timeout then cancels it, and the caller's retry pays
    the provider twice (found by the chaos suite beside a CPU hog). So a deadline that comes round more than
    ``LOOP_LATE_S`` late is put off by twice its lateness (roughly two more turns of the loop, which is what
    reading a buffered answer takes), again while the loop stays late, up to ``grace_s`` in all.

    One object and one timer per use, on the worker-adapter's per-call path: the cancel-to-``TimeoutError``
    conversion is ``asyncio.Timeout``'s (an expired deadline cancels the task at the loop's next turn; a cancel
    from anyone else is never turned into a timeout), without its generator wrapper and per-entry rescheduling.
    """

    __slots__ = ("_cancelling", "_expired", "_grace", "_granted", "_handle", "_loop", "_seconds", "_task")

    def __init__(self, seconds: float, *, grace_s: float | None = None) -> None:
        self._seconds = seconds
        self._grace = longest_wait(seconds, grace_s) - seconds
        self._granted = 0.0
        self._expired = False
        self._handle: asyncio.Handle | None = None
        self._task: asyncio.Task[object] | None = None

    async def __aenter__(self) -> None:
        if self._task is not None:
            raise RuntimeError("answer_timeout has already been entered")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("answer_timeout should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        loop = self._loop = asyncio.get_running_loop()
        end = loop.time() + self._seconds
        self._handle = loop.call_at(end, self._due, end)

    def _due(self, when: float) -> None:
        loop = self._loop
        now = loop.time()
        late = now - when
        if late > LOOP_LATE_S and self._granted < self._grace:
            more = min(2 * late, self._grace - self._granted)
            self._granted += more
            self._handle = loop.call_at(now + more, self._due, now + more)
            log.debug(
                "answer deadline put off: the loop is behind", late_s=round(late, 3), more_s=round(more, 3)
            )
            return
        self._handle = loop.call_soon(self._expire)  # expires at the loop's next turn

    def _expire(self) -> None:
        self._handle = None
        self._expired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (
            self._expired
            and self._task is not None
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc  # no other cancel is pending: this one was ours
