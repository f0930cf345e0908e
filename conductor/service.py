"""The shape every service shares, so one process can run one service (`serve planner`) or all five (`serve all`).

A service is a ``NatsRouter`` with its subscribers plus ``start``/``stop`` hooks for its resources (HTTP clients,
process pools, models). ``conductor.runtime.running`` includes the routers of the requested services into one
broker.

Handlers follow one pattern (see any ``services/*/app.py``): take the raw message, decode through
``conductor.wire.decode`` (bad input -> typed error reply naming the field), call the pure core, return
``conductor.wire.encode(reply)``. Subscribers on request/reply subjects use a queue group named after the service,
so replicas share the load, and pass ``max_workers=settings.handler_concurrency``: FastStream's NATS subscribers
otherwise handle one message at a time.
"""

from __future__ import annotations

from typing import Protocol

from faststream.nats import NatsBroker, NatsRouter


class Service(Protocol):
    name: str
    router: NatsRouter

    async def start(self, broker: NatsBroker) -> None:
        """Acquire resources; the broker is connected. Outgoing requests go through ``broker``."""

    async def stop(self) -> None:
        """Release resources; called after subscribers stopped taking messages."""
