"""Warm helper processes speaking length-prefixed JSON frames, with deadlines enforced from outside.

Math processes and sandbox supervisors are both long-lived children that answer one request at a time. One that
misses its deadline or dies is killed and replaced in the background; the caller gets a typed error (an
infrastructure failure, never a wrong answer). Nothing a request contains can hang the set: the wait is always
bounded here, in the parent, where the input cannot reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable

import msgspec
import structlog

from services.verifier.fairness import FairQueue
from services.verifier.sandbox.runtime import frames

log = structlog.get_logger("conductor.verifier.processes")


class ProcessError(Exception):
    """The process, not the input, failed: this becomes an infrastructure-error verdict."""


class ProcessLost(ProcessError):
    """The process died or broke the protocol mid-request."""


class DeadlineExceeded(ProcessError):
    """Our own deadline fired; the process was killed and is being replaced."""


class ProcessUnavailable(ProcessError):
    """No process could be started."""


DATA_FD = "@DATA_FD@"


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    """How to start one process. ``data`` is handed over on an inherited pipe whose number replaces ``@DATA_FD@`` in
    ``argv`` (bubblewrap reads its seccomp program that way)."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None
    data: bytes | None = None


Spawner = Callable[[int], Launch]


class WarmProcess:
    """One child process; ``hello`` is the first frame it sent (its self-report)."""

    def __init__(self, proc: asyncio.subprocess.Process, hello: dict) -> None:
        self.proc = proc
        self.hello = hello

    @classmethod
    async def start(cls, launch: Launch, timeout: float) -> WarmProcess:
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
        proc = cls(proc, {})
        try:
            proc.hello = await asyncio.wait_for(proc._read(), timeout)
        except (TimeoutError, ProcessLost) as exc:
            await proc.kill()
            raise ProcessUnavailable(f"{launch.argv[0]} did not start: {exc!r}") from exc
        return proc

    async def _read(self) -> dict:
        stream = self.proc.stdout
        assert stream is not None
        try:
            header = await stream.readexactly(frames.HEADER.size)
            (size,) = frames.HEADER.unpack(header)
            if size > frames.DEFAULT_MAX:
                raise ProcessLost(f"oversized frame {size}")
            body = await stream.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise ProcessLost(f"process exited (rc={self.proc.returncode})") from exc
        try:
            reply = frames.decode_body(body)
        except frames.FrameError as exc:
            raise ProcessLost(str(exc)) from exc
        if not isinstance(reply, dict):
            raise ProcessLost("reply is not an object")
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
            raise ProcessLost(f"process pipe closed: {exc}") from exc
        if "fatal" in reply:
            raise ProcessLost(f"process gave up: {reply['fatal']}")
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
    """A numbered place in the set: its own process (and, for sandboxes, its own uids)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.process: WarmProcess | None = None
        self.ready: asyncio.Task[WarmProcess] | None = None


class ProcessSet:
    """``size`` warm processes; ``lease()`` hands one out exclusively, ``call`` is lease + one request."""

    def __init__(self, name: str, spawner: Spawner, size: int, start_timeout: float) -> None:
        self.name = name
        self.spawner = spawner
        self.size = max(1, size)
        self.start_timeout = start_timeout
        self.slots = [Slot(i) for i in range(self.size)]
        self.idle: FairQueue[Slot] = FairQueue()  # round-robin across requesters, not first come
        self.restarts = 0

    async def start(self) -> list[dict]:
        """Start every process concurrently; returns their hello frames."""
        for slot in self.slots:
            self._respawn(slot)
        started = await asyncio.gather(*(slot.ready for slot in self.slots if slot.ready))
        for slot in self.slots:
            self.idle.put(slot)
        return [w.hello for w in started]

    def _respawn(self, slot: Slot) -> None:
        launch = self.spawner(slot.index)

        async def boot() -> WarmProcess:
            proc = await WarmProcess.start(launch, self.start_timeout)
            slot.process = proc
            return proc

        slot.process = None
        slot.ready = asyncio.ensure_future(boot())

    async def _process(self, slot: Slot) -> WarmProcess:
        if slot.process is not None and slot.process.proc.returncode is None:
            return slot.process
        if slot.ready is None or (slot.ready.done() and (slot.ready.exception() or slot.process is None)):
            self._respawn(slot)
        try:
            return await asyncio.shield(slot.ready)  # type: ignore[arg-type]
        except ProcessUnavailable:
            slot.ready = None
            raise

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Lease]:
        slot = await self.idle.get()
        try:
            yield Lease(self, slot)
        finally:
            self.idle.put(slot)

    async def call(self, request: dict, timeout: float) -> dict:
        async with self.lease() as lease:
            return await lease.call(request, timeout)

    async def _failed(self, slot: Slot) -> None:
        """Kill the slot's process and start its replacement now, so the next lease finds it warm."""
        self.restarts += 1
        if slot.process is not None:
            await slot.process.kill()
        self._respawn(slot)

    async def close(self) -> None:
        for slot in self.slots:
            if slot.ready is not None and not slot.ready.done():
                slot.ready.cancel()
            if slot.process is not None:
                await slot.process.kill()


class Lease:
    """Exclusive use of one slot for a sequence of requests (e.g. every test of one program)."""

    def __init__(self, owner: ProcessSet, slot: Slot) -> None:
        self.owner = owner
        self.slot = slot

    @property
    def slot_index(self) -> int:
        return self.slot.index

    async def call(self, request: dict, timeout: float) -> dict:
        proc = await self.owner._process(self.slot)
        started = time.monotonic()
        try:
            return await proc.call(request, timeout)
        except ProcessError as exc:
            log.warning(
                "helper process failed",
                kind=self.owner.name,
                slot=self.slot.index,
                after_s=round(time.monotonic() - started, 3),
                error=str(exc),
            )
            await self.owner._failed(self.slot)
            raise
        except asyncio.CancelledError:
            await self.owner._failed(self.slot)  # a half-read reply would poison the next request
            raise
