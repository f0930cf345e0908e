"""Small asyncio helpers the services share: stopping helper tasks, timeouts a busy loop cannot trip."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

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


@contextlib.asynccontextmanager
async def answer_timeout(seconds: float, *, grace_s: float | None = None) -> AsyncIterator[None]:
    """``asyncio.timeout(seconds)`` for an answer from outside the process, in which our own busy loop does not
    count against the other side: it waits at most ``longest_wait(seconds, grace_s)`` (``grace_s`` defaults to
    ``seconds``), and exactly ``seconds`` on a loop that keeps time.

    A starved loop (a CPU-bound machine) runs its timers late, and an answer that arrived in time can still be
    waiting to be read when the deadline comes round; a plain timeout then cancels it, and the caller's retry pays
    the provider twice (found by the chaos suite beside a CPU hog). So a deadline that comes round more than
    ``LOOP_LATE_S`` late is put off by twice its lateness (roughly two more turns of the loop, which is what
    reading a buffered answer takes), again while the loop stays late, up to ``grace_s`` in all.
    """
    loop = asyncio.get_running_loop()
    grace = longest_wait(seconds, grace_s) - seconds
    async with asyncio.timeout(None) as timer:
        granted = 0.0

        def due(when: float) -> None:
            nonlocal handle, granted
            now = loop.time()
            late = now - when
            if late > LOOP_LATE_S and granted < grace:
                more = min(2 * late, grace - granted)
                granted += more
                handle = loop.call_at(now + more, due, now + more)
                log.debug(
                    "answer deadline put off: the loop is behind",
                    late_s=round(late, 3),
                    more_s=round(more, 3),
                )
                return
            timer.reschedule(now)  # expires at the loop's next turn

        end = loop.time() + seconds
        handle = loop.call_at(end, due, end)
        try:
            yield
        finally:
            handle.cancel()
