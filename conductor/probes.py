"""The process's HTTP face for operators: Prometheus scrapes ``/metrics``, Kubernetes probes ``/healthz``/``/readyz``.

A few dozen lines on ``asyncio.start_server`` instead of a web framework: three GET routes, one response per
connection, nothing else to depend on. ``/healthz`` answers while the event loop runs; ``/readyz`` answers 200 only
while ``ready()`` holds (services started and the NATS connection up), so a replica cut off from NATS — or draining
— leaves the load balancer's rotation until it reconnects.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable

import structlog

from conductor import metrics
from conductor.service import unbound

log = structlog.get_logger("conductor.probes")

_REASONS = {
    200: "OK",
    404: "Not Found",
    405: "Method Not Allowed",
    400: "Bad Request",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"
_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
_READ_TIMEOUT_S = 5.0  # a client that never finishes its request line does not hold a connection open


class ProbeServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port``.

    ``strict=False`` (the `serve` command's default port) falls back to a free port when the port is taken — two
    local `conductor serve` processes must not fail over a metrics port; an explicitly configured port is strict.
    """

    def __init__(self, host: str, port: int, ready: Callable[[], bool], *, strict: bool = True) -> None:
        self.host = host
        self.port = port
        self.ready = ready
        self.strict = strict
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen; returns the bound port."""
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            if self.strict or exc.errno != errno.EADDRINUSE:
                raise unbound("CONDUCTOR_METRICS_PORT", self.host, self.port, exc) from None
            log.warning("metrics port in use; listening on a free port instead", port=self.port)
            self._server = await asyncio.start_server(self._handle, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("metrics and probes listening", host=self.host, port=self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def route(self, method: str, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for one request."""
        if method not in {"GET", "HEAD"}:
            return 405, _TEXT, b"method not allowed\n"
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return 200, _PROMETHEUS, metrics.exposition()
        if path == "/healthz":
            return 200, _TEXT, b"ok\n"
        if path == "/readyz":
            return (200, _TEXT, b"ready\n") if self.ready() else (503, _TEXT, b"not ready\n")
        return 404, _TEXT, b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) == 3:
                status, ctype, body = self.route(parts[0], parts[1])
            else:
                status, ctype, body = 400, _TEXT, b"bad request\n"
            head_only = parts[:1] == ["HEAD"]
            writer.write(_response(status, ctype, b"" if head_only else body, len(body)))
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError) as exc:
            log.debug(
                "probe connection dropped", error=repr(exc)
            )  # a half-open scrape is the client's problem
        finally:
            writer.close()


def _response(status: int, ctype: str, body: bytes, length: int) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\nContent-Length: {length}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
