"""Warm worker processes speaking length-prefixed JSON frames, with deadlines enforced from outside.

Math workers and sandbox supervisors are both long-lived children that answer one request at a time. A worker that
misses its deadline or dies is killed and replaced in the background; the caller gets a typed error (an
infrastructure failure, never a wrong answer). Nothing a request contains can hang the pool: the wait is always
bounded here, in the parent, where the input cannot reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable

import msgspec

from services.verifier.sandbox.runtime import frames

log = logging.getLogger(__name__)


class WorkerError(Exception):
    """The worker, not the input, failed: this becomes an infrastructure-error verdict."""


class WorkerLost(WorkerError):
    """The worker process died or broke the protocol mid-request."""


class DeadlineExceeded(WorkerError):
    """Our own deadline fired; the worker was killed and is being replaced."""


class WorkerUnavailable(WorkerError):
    """No worker could be started."""


DATA_FD = "@DATA_FD@"


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    """How to start one worker. ``data`` is handed over on an inherited pipe whose number replaces ``@DATA_FD@`` in
    ``argv`` (bubblewrap reads its seccomp program that way)."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None
    data: bytes | None = None


Spawner = Callable[[int], Launch]


class Worker:
    """One child process; ``hello`` is the first frame it sent (its self-report)."""

    def __init__(self, proc: asyncio.subprocess.Process, hello: dict) -> None:
        self.proc = proc
        self.hello = hello

    @classmethod
    async def start(cls, launch: Launch, timeout: float) -> Worker:
        argv, fds = launch.argv, ()
        if launch.data is not None:
            read_end, write_end = os.pipe()
            os.write(write_end, launch.data)  # small (a seccomp program): fits the pipe buffer
            os.close(write_end)
            argv, fds = [str(read_end) if a == DATA_FD else a for a in argv], (read_end,)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=launch.env,
                cwd=launch.cwd,
                limit=frames.DEFAULT_MAX,
                start_new_session=True,
                pass_fds=fds,
            )
        finally:
            for fd in fds:
                os.close(fd)
        worker = cls(proc, {})
        try:
            worker.hello = await asyncio.wait_for(worker._read(), timeout)
        except (TimeoutError, WorkerLost) as exc:
            await worker.kill()
            raise WorkerUnavailable(f"{launch.argv[0]} did not start: {exc!r}") from exc
        return worker

    async def _read(self) -> dict:
        stream = self.proc.stdout
        assert stream is not None
        try:
            header = await stream.readexactly(frames.HEADER.size)
            (size,) = frames.HEADER.unpack(header)
            if size > frames.DEFAULT_MAX:
                raise WorkerLost(f"oversized frame {size}")
            body = await stream.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise WorkerLost(f"worker exited (rc={self.proc.returncode})") from exc
        try:
            reply = frames.decode_body(body)
        except frames.FrameError as exc:
            raise WorkerLost(str(exc)) from exc
        if not isinstance(reply, dict):
            raise WorkerLost("reply is not an object")
        return reply

    async def call(self, request: dict, timeout: float) -> dict:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(frames.encode(request))
            await asyncio.wait_for(stdin.drain(), timeout)
            reply = await asyncio.wait_for(self._read(), timeout)
        except TimeoutError as exc:
            raise DeadlineExceeded(f"no reply within {timeout:.1f}s") from exc
        except (ConnectionError, BrokenPipeError) as exc:
            raise WorkerLost(f"worker pipe closed: {exc}") from exc
        if "fatal" in reply:
            raise WorkerLost(f"worker gave up: {reply['fatal']}")
        return reply

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5)


class Slot:
    """A numbered place in the pool: its own worker (and, for sandboxes, its own uids)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.worker: Worker | None = None
        self.ready: asyncio.Task[Worker] | None = None


class WorkerPool:
    """``size`` warm workers; ``lease()`` hands one out exclusively, ``call`` is lease + one request."""

    def __init__(self, name: str, spawner: Spawner, size: int, start_timeout: float) -> None:
        self.name = name
        self.spawner = spawner
        self.size = max(1, size)
        self.start_timeout = start_timeout
        self.slots = [Slot(i) for i in range(self.size)]
        self.idle: asyncio.Queue[Slot] = asyncio.Queue()
        self.restarts = 0

    async def start(self) -> list[dict]:
        """Start every worker concurrently; returns their hello frames."""
        for slot in self.slots:
            self._respawn(slot)
        workers = await asyncio.gather(*(slot.ready for slot in self.slots if slot.ready))
        for slot in self.slots:
            self.idle.put_nowait(slot)
        return [w.hello for w in workers]

    def _respawn(self, slot: Slot) -> None:
        launch = self.spawner(slot.index)

        async def boot() -> Worker:
            worker = await Worker.start(launch, self.start_timeout)
            slot.worker = worker
            return worker

        slot.worker = None
        slot.ready = asyncio.ensure_future(boot())

    async def _worker(self, slot: Slot) -> Worker:
        if slot.worker is not None and slot.worker.proc.returncode is None:
            return slot.worker
        if slot.ready is None or (slot.ready.done() and (slot.ready.exception() or slot.worker is None)):
            self._respawn(slot)
        try:
            return await asyncio.shield(slot.ready)  # type: ignore[arg-type]
        except WorkerUnavailable:
            slot.ready = None
            raise

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        slot = await self.idle.get()
        try:
            yield Lease(self, slot)
        finally:
            self.idle.put_nowait(slot)

    async def call(self, request: dict, timeout: float) -> dict:
        async with self.lease() as lease:
            return await lease.call(request, timeout)

    async def _failed(self, slot: Slot) -> None:
        """Kill the slot's worker and start its replacement now, so the next lease finds it warm."""
        self.restarts += 1
        if slot.worker is not None:
            await slot.worker.kill()
        self._respawn(slot)

    async def close(self) -> None:
        for slot in self.slots:
            if slot.ready is not None and not slot.ready.done():
                slot.ready.cancel()
            if slot.worker is not None:
                await slot.worker.kill()


class Lease:
    """Exclusive use of one slot for a sequence of requests (e.g. every test of one program)."""

    def __init__(self, pool: WorkerPool, slot: Slot) -> None:
        self.pool = pool
        self.slot = slot

    @property
    def slot_index(self) -> int:
        return self.slot.index

    async def call(self, request: dict, timeout: float) -> dict:
        worker = await self.pool._worker(self.slot)
        started = time.monotonic()
        try:
            return await worker.call(request, timeout)
        except WorkerError as exc:
            log.warning(
                "%s worker %d failed after %.2fs: %s",
                self.pool.name,
                self.slot.index,
                time.monotonic() - started,
                exc,
            )
            await self.pool._failed(self.slot)
            raise
        except asyncio.CancelledError:
            await self.pool._failed(self.slot)  # a half-read reply would poison the next request
            raise
