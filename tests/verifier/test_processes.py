"""Warm workers with outside deadlines: a hung or dead worker is killed and replaced; the caller gets a typed error."""

from __future__ import annotations

import sys
import textwrap

import pytest

from services.verifier.processes import DeadlineExceeded, Launch, ProcessLost, ProcessSet, ProcessUnavailable

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
    procs = ProcessSet("fake", spawner, 1, start_timeout=20)
    (hello,) = await procs.start()
    try:
        assert (await procs.call({"do": "echo", "x": 1}, 5))["echo"] == 1
        with pytest.raises(DeadlineExceeded):
            await procs.call({"do": "hang"}, 0.3)
        reply = await procs.call({"do": "echo", "x": 2}, 10)  # a fresh process took the slot
        assert reply["echo"] == 2 and reply["pid"] != hello["pid"]
        with pytest.raises(ProcessLost):
            await procs.call({"do": "die"}, 5)
        assert (await procs.call({"do": "echo", "x": 3}, 10))["echo"] == 3
        assert procs.restarts == 2
    finally:
        await procs.close()


@pytest.mark.asyncio
async def test_a_worker_that_cannot_start_is_reported() -> None:
    procs = ProcessSet(
        "broken",
        lambda slot: Launch(argv=[sys.executable, "-c", "import time; time.sleep(60)"]),
        1,
        start_timeout=0.5,
    )
    with pytest.raises(ProcessUnavailable):
        await procs.start()
    await procs.close()
