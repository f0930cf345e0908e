"""Length-prefixed JSON frames over pipes: the only protocol between the host, the supervisor and its children.

A 4-byte big-endian length then that many bytes of UTF-8 JSON. Reads are unbuffered ``os.read`` calls so a forked
child never inherits half a frame sitting in a userspace buffer.
"""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")
DEFAULT_MAX = 64 * 1024 * 1024


class FrameError(Exception):
    """The peer closed the pipe, sent an oversized frame or sent something that is not JSON."""


def encode(obj: object) -> bytes:
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> object:
    try:
        return json.loads(body.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"bad frame: {exc}") from exc


def read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise FrameError("peer closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read(fd: int, max_size: int = DEFAULT_MAX) -> object:
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if size > max_size:
        raise FrameError(f"frame of {size} bytes exceeds {max_size}")
    return decode_body(read_exact(fd, size))


def write(fd: int, obj: object) -> None:
    write_bytes(fd, encode(obj))


def write_bytes(fd: int, frame: bytes) -> None:
    data = memoryview(frame)
    while data:
        sent = os.write(fd, data)
        data = data[sent:]
