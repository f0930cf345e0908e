"""Small asyncio helpers the services share."""

from __future__ import annotations

import asyncio

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
