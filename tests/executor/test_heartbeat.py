"""The in-progress heartbeat of a durable task: beats while the task runs, survives a failed beat, and stops."""

from __future__ import annotations

import asyncio

import nats.errors

from services.executor.config import IntakeSettings
from services.executor.intake import Intake


class _Msg:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.beats = 0

    async def in_progress(self) -> None:
        if self.failures:
            self.failures -= 1
            raise nats.errors.ConnectionReconnectingError
        self.beats += 1


async def test_a_failed_beat_is_logged_and_the_next_one_is_sent_then_it_stops():
    intake = Intake(None, None, IntakeSettings(ack_wait_s=0.09))  # type: ignore[arg-type]
    msg = _Msg(failures=1)
    finished = asyncio.Event()
    task = asyncio.create_task(intake._keep_alive(msg, finished))  # type: ignore[arg-type]
    await asyncio.sleep(0.25)  # about eight beat periods
    assert not task.done() and msg.failures == 0 and msg.beats >= 2
    finished.set()
    await asyncio.wait_for(task, timeout=1)  # ends on the flag alone, no cancel needed
    beats = msg.beats
    await asyncio.sleep(0.1)
    assert msg.beats == beats
