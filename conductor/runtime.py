"""Which services exist and how to run a set of them in this process (`serve`, `demo`, end-to-end tests).

Each ``services/<name>/app.py`` exposes ``create_service(env) -> Service``; this module is the only place that
knows the list, so the CLI and tests never reach into a service's internals.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Mapping, Sequence

from faststream.nats import NatsBroker

from conductor.broker import make_broker
from conductor.logging import configure_logging, get_logger
from conductor.service import Service
from conductor.settings import CommonSettings

SERVICES: dict[str, str] = {
    "executor": "services.executor.app",
    "planner": "services.planner.app",
    "worker-adapter": "services.worker_adapter.app",
    "verifier": "services.verifier.app",
}


class UnknownServiceError(ValueError):
    pass


def service_names(spec: str) -> list[str]:
    """``all`` or a comma-separated list of service names."""
    names = list(SERVICES) if spec == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in SERVICES]
    if unknown or not names:
        raise UnknownServiceError(f"unknown service(s) {unknown or spec!r}; choose from {[*SERVICES, 'all']}")
    return names


def create_services(names: Sequence[str], env: Mapping[str, str] | None = None) -> list[Service]:
    return [importlib.import_module(SERVICES[n]).create_service(env) for n in names]


@contextlib.asynccontextmanager
async def running(services: Sequence[Service], settings: CommonSettings, *, name: str) -> AsyncIterator[NatsBroker]:
    """Connect one broker, include every service's router, start resources; undo it all on exit."""
    configure_logging(settings.log_level, json=settings.log_json)
    broker = make_broker(settings, name=name)
    for svc in services:
        broker.include_router(svc.router)
    log = get_logger("conductor.runtime")
    started: list[Service] = []
    await broker.start()
    try:
        for svc in services:
            await svc.start(broker)
            started.append(svc)
        log.info("services started", services=[s.name for s in services], nats=settings.nats_url)
        yield broker
    finally:
        await broker.stop()
        for svc in reversed(started):
            await svc.stop()
        log.info("services stopped", services=[s.name for s in started])
