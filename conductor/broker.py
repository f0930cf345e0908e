"""The one place a FastStream NATS broker is built, so every service shares serializer, reconnect and drain policy."""

from __future__ import annotations

from fast_depends.msgspec import MsgSpecSerializer
from faststream.nats import NatsBroker

from conductor.settings import CommonSettings


def make_broker(settings: CommonSettings, *, name: str) -> NatsBroker:
    """A broker that reconnects forever (readiness follows the connection) and drains on shutdown.

    Handlers decode their own payloads through ``conductor.wire`` so bad input becomes a typed reply, not a
    silently dropped message; FastStream's own per-message logging is off (structlog carries our context).
    """
    return NatsBroker(
        settings.nats_url,
        name=f"conductor-{name}",
        logger=None,
        serializer=MsgSpecSerializer(),
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        graceful_timeout=settings.drain_timeout_s,
    )
