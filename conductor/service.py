"""The shape every service shares, so one process can run one service (`serve planner`) or all five (`serve all`).

A service is a ``NatsRouter`` with its subscribers plus ``start``/``stop`` hooks for its resources (HTTP clients,
process pools, models). ``build_app`` includes the routers of the requested services into one broker.

Handlers follow one pattern (see any ``services/*/app.py``): take the raw message, decode through
``conductor.wire.decode`` (bad input -> typed error reply naming the field), call the pure core, return
``conductor.wire.encode(reply)``. Subscribers on request/reply subjects use a queue group named after the service,
so replicas share the load, and pass ``max_workers=settings.handler_concurrency``: FastStream's NATS subscribers
otherwise handle one message at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from faststream import FastStream
from faststream.nats import NatsBroker, NatsRouter

from conductor.broker import make_broker
from conductor.logging import configure_logging, get_logger
from conductor.settings import CommonSettings


class Service(Protocol):
    name: str
    router: NatsRouter

    async def start(self, broker: NatsBroker) -> None:
        """Acquire resources; the broker is connected. Outgoing requests go through ``broker``."""

    async def stop(self) -> None:
        """Release resources; called after subscribers stopped taking messages."""


def build_app(services: Sequence[Service], settings: CommonSettings, *, name: str) -> tuple[FastStream, NatsBroker]:
    configure_logging(settings.log_level, json=settings.log_json)
    broker = make_broker(settings, name=name)
    for svc in services:
        broker.include_router(svc.router)
    log = get_logger("conductor.service")

    async def _started() -> None:
        for svc in services:
            await svc.start(broker)
        log.info("services started", services=[s.name for s in services], nats=settings.nats_url)

    async def _stopping() -> None:
        for svc in reversed(services):
            await svc.stop()
        log.info("services stopped", services=[s.name for s in services])

    app = FastStream(broker, after_startup=[_started], after_shutdown=[_stopping])
    return app, broker
