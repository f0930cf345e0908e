"""A tiny select loop for the supervisor: drain several pipes with caps, feed others, stop on a condition or deadline.

The supervisor must never block on a child: a candidate that stops reading its stdin, floods its stdout or never
answers a call would otherwise hang the whole sandbox. Every pipe is non-blocking and every wait has a deadline.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable

from frames import HEADER, FrameError, decode_body


class Capped:
    """Collects a stream up to ``cap`` bytes and remembers whether it overflowed."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False
        self.eof = False

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            self.eof = True
            return
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.overflow = True
        self.data += chunk[: max(room, 0)]


class Tail:
    """Keeps the last ``cap`` bytes of a stream (diagnostics: a library's warnings on stderr are no output limit)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.overflow = False  # never: only what a program answers with is capped
        self.eof = False

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            self.eof = True
            return
        self.data += chunk[-self.cap :]
        del self.data[: max(0, len(self.data) - self.cap)]


class FrameReader:
    """Incremental decoder of length-prefixed frames arriving in arbitrary chunks."""

    def __init__(self, max_size: int, max_total: int | None = None) -> None:
        self.max_size = max_size
        self.max_total = max_total
        self.total = 0
        self.buf = bytearray()
        self.frames: list[object] = []
        self.eof = False
        self.error: str | None = None

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            self.eof = True
            return
        if self.error:
            return
        self.total += len(chunk)
        if self.max_total is not None and self.total > self.max_total:
            self.error = f"results exceed {self.max_total} bytes"
            return
        self.buf += chunk
        while len(self.buf) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buf)
            if size > self.max_size:
                self.error = f"frame of {size} bytes exceeds {self.max_size}"
                return
            if len(self.buf) < HEADER.size + size:
                return
            body = bytes(self.buf[HEADER.size : HEADER.size + size])
            del self.buf[: HEADER.size + size]
            try:
                self.frames.append(decode_body(body))
            except FrameError as exc:
                self.error = str(exc)
                return


class Pump:
    """Registers readers (fd -> sink with ``feed``) and writers (fd -> pending bytes), then runs until done."""

    def __init__(self) -> None:
        self.sel = selectors.DefaultSelector()
        self.readers: dict[int, Callable[[bytes], None]] = {}
        self.pending: dict[int, bytearray] = {}
        self.close_after: set[int] = set()

    def read(self, fd: int, sink: Callable[[bytes], None]) -> None:
        os.set_blocking(fd, False)
        self.readers[fd] = sink
        self.sel.register(fd, selectors.EVENT_READ)

    def write(self, fd: int, data: bytes, close: bool = False) -> None:
        os.set_blocking(fd, False)
        if fd in self.pending:
            self.pending[fd] += data
        else:
            self.pending[fd] = bytearray(data)
            self.sel.register(fd, selectors.EVENT_WRITE)
        if close:
            self.close_after.add(fd)

    def forget(self, fd: int) -> None:
        if fd in self.readers or fd in self.pending:
            self.sel.unregister(fd)
        self.readers.pop(fd, None)
        self.pending.pop(fd, None)

    def run(self, done: Callable[[], bool], deadline: float, tick: float = 0.25) -> bool:
        """Pump until ``done()`` or the monotonic ``deadline``; True when done, False on deadline. ``done`` is
        re-checked at least every ``tick`` seconds even when no pipe is ready."""
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self.readers and not self.pending:
                time.sleep(min(left, 0.005))
                continue
            for key, _ in self.sel.select(min(left, tick)):
                self._service(key.fd)
        return True

    def _service(self, fd: int) -> None:
        if fd in self.readers:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            sink = self.readers[fd]
            if not chunk:
                self.forget(fd)
            sink(chunk)
            return
        buf = self.pending[fd]
        try:
            sent = os.write(fd, buf[: 1 << 16])
        except BlockingIOError:
            return
        except OSError:  # reader went away (EPIPE): the child stopped listening, nothing more to send
            sent = len(buf)
        del buf[:sent]
        if not buf:
            self.forget(fd)
            if fd in self.close_after:
                self.close_after.discard(fd)
                os.close(fd)

    def close(self) -> None:
        for fd in self.close_after:
            try:
                os.close(fd)
            except OSError:
                pass
        self.close_after.clear()
        self.sel.close()
