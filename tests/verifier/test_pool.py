"""Warm workers with outside deadlines: a hung or dead worker is killed and replaced; the caller gets a typed error."""

from __future__ import annotations

import sys
import textwrap

import pytest

from services.verifier.pool import DeadlineExceeded, Launch, WorkerLost, WorkerPool, WorkerUnavailable

# A tiny worker speaking our frames: echoes, hangs, or dies on request.
WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {runtime!r})
    import frames
    frames.write(1, {{"hello": True, "pid": os.getpid()}})
    while True:
        req = frames.read(0)
        if req["do"] == "hang":
            time.sleep(3600)
        if req["do"] == "die":
            os._exit(1)
        frames.write(1, {{"echo": req["x"], "pid": os.getpid()}})
""")


def spawner(slot: int) -> Launch:
    from services.verifier.sandbox.launcher import RUNTIME_DIR

    return Launch(argv=[sys.executable, "-c", WORKER.format(runtime=str(RUNTIME_DIR))])


@pytest.mark.asyncio
async def test_echo_and_deadline_kill_and_respawn() -> None:
    pool = WorkerPool("fake", spawner, 1, start_timeout=20)
    (hello,) = await pool.start()
    try:
        assert (await pool.call({"do": "echo", "x": 1}, 5))["echo"] == 1
        with pytest.raises(DeadlineExceeded):
            await pool.call({"do": "hang"}, 0.3)
        reply = await pool.call({"do": "echo", "x": 2}, 10)  # a fresh worker took the slot
        assert reply["echo"] == 2 and reply["pid"] != hello["pid"]
        with pytest.raises(WorkerLost):
            await pool.call({"do": "die"}, 5)
        assert (await pool.call({"do": "echo", "x": 3}, 10))["echo"] == 3
        assert pool.restarts == 2
    finally:
        await pool.close()


@pytest.mark.asyncio
async def test_a_worker_that_cannot_start_is_reported() -> None:
    pool = WorkerPool(
        "broken",
        lambda slot: Launch(argv=[sys.executable, "-c", "import time; time.sleep(60)"]),
        1,
        start_timeout=0.5,
    )
    with pytest.raises(WorkerUnavailable):
        await pool.start()
    await pool.close()
