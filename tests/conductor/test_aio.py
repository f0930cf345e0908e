"""``answer_timeout``: a timeout that our own starved event loop cannot trip, and that is exact on a loop that
keeps time (conductor/aio.py). A starved loop is simulated by a callback that blocks it (``time.sleep``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from conductor.aio import answer_timeout, longest_wait


def starve(after_s: float, for_s: float) -> None:
    """Block the running loop for ``for_s`` seconds, ``after_s`` from now: a CPU-bound machine's busy loop."""
    asyncio.get_running_loop().call_later(after_s, time.sleep, for_s)


async def test_an_answer_that_came_in_time_is_read_on_a_starved_loop():
    """Failed with ``asyncio.timeout``: the answer (due after 50 ms) and the deadline (200 ms) both came round
    when the loop woke after 500 ms, and the deadline cancelled the answer that was already there."""
    starve(0.01, 0.5)
    async with answer_timeout(0.2):
        await asyncio.sleep(0.05)


async def test_a_plain_timeout_loses_that_answer():
    """The failure above, as it happens with ``asyncio.timeout`` (what the worker-adapter used before). The loop is
    starved at once, and the answer is due late enough (150 ms) that a busy machine delaying the loop's first turn
    cannot bring it into that turn (where it would be read before the deadline came round)."""
    starve(0.0, 0.5)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.2):
            await asyncio.sleep(0.15)


async def test_no_answer_times_out_on_time_when_the_loop_keeps_time():
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        async with answer_timeout(0.2):
            await asyncio.sleep(5)
    assert 0.2 <= time.monotonic() - start < 0.35


async def test_no_answer_times_out_within_the_longest_wait_on_a_starved_loop():
    """A hung provider is still given up on when the loop stays busy: after ``longest_wait`` at most (plus the
    starvation that outlasts it, which no timer can preempt)."""
    assert longest_wait(0.2) == 0.4 and longest_wait(0.2, grace_s=1.0) == 1.2
    start = time.monotonic()
    starve(0.01, 0.3)
    with pytest.raises(TimeoutError):
        async with answer_timeout(0.2):
            await asyncio.sleep(5)
    assert time.monotonic() - start < 0.3 + longest_wait(0.2) + 0.1


async def test_an_answer_before_the_deadline_cancels_nothing():
    async with answer_timeout(0.2):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # the deadline's timer is gone: nothing is cancelled later


async def test_a_cancel_from_elsewhere_stays_a_cancel():
    """Only the deadline's own cancel becomes ``TimeoutError``; a caller's cancel (shutdown, the server's watch)
    goes through as it is."""

    async def wait() -> None:
        async with answer_timeout(5):
            await asyncio.sleep(5)

    task = asyncio.create_task(wait())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_an_answer_timeout_is_entered_once():
    timer = answer_timeout(0.2)
    async with timer:
        pass
    with pytest.raises(RuntimeError):
        async with timer:
            pass
