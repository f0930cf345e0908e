"""Which services exist and how to run a set of them in this process (`serve`, `demo`, end-to-end tests).

Each ``services/<name>/app.py`` exposes ``create_service(env) -> Service``; this module is the only place that
knows the list, so the CLI and tests never reach into a service's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from faststream.nats import NatsBroker

from conductor.broker import make_broker
from conductor.endpoints import EndpointServer
from conductor.logging import configure_logging, get_logger
from conductor.probes import ProbeServer
from conductor.service import Service
from conductor.settings import CommonSettings

SERVICES: dict[str, str] = {
    "executor": "services.executor.app",
    "planner": "services.planner.app",
    "worker-adapter": "services.worker_adapter.app",
    "verifier": "services.verifier.app",
    "gateway": "services.gateway.app",
}
ON_REQUEST = frozenset({"gateway"})
"""Services `all` leaves out: the HTTP gateway opens a port and needs API keys, so it is asked for by name
(`serve gateway`, `serve all,gateway`)."""


class UnknownServiceError(ValueError):
    pass


def service_names(spec: str) -> list[str]:
    """A comma-separated list of service names; ``all`` stands for every service but those in ``ON_REQUEST``."""
    names: list[str] = []
    for part in (s.strip() for s in spec.split(",")):
        expanded = [n for n in SERVICES if n not in ON_REQUEST] if part == "all" else [part] if part else []
        names.extend(n for n in expanded if n not in names)
    unknown = [n for n in names if n not in SERVICES]
    if unknown or not names:
        raise UnknownServiceError(f"unknown service(s) {unknown or spec!r}; choose from {[*SERVICES, 'all']}")
    return names


def create_services(names: Sequence[str], env: Mapping[str, str] | None = None) -> list[Service]:
    return [importlib.import_module(SERVICES[n]).create_service(env) for n in names]


@contextlib.asynccontextmanager
async def running(
    services: Sequence[Service], settings: CommonSettings, *, name: str, strict_metrics_port: bool = True
) -> AsyncIterator[NatsBroker]:
    """Connect one broker, start every service's resources, then its subscribers; undo it all on exit.

    With ``settings.metrics_port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are served from the start
    (health during a slow start-up), ready once every service started and while NATS is connected.
    """
    configure_logging(settings.log_level, json=settings.log_json)
    broker = make_broker(settings, name=name)
    for svc in services:
        broker.include_router(svc.router)
    log = get_logger("conductor.app.runtime")
    started: list[Service] = []
    accepting = False
    connection = await broker.connect()
    servers = [
        EndpointServer(
            connection,
            svc.endpoints,
            concurrency=settings.handler_concurrency,
            drain_timeout_s=settings.drain_timeout_s,
        )
        for svc in services
    ]
    probes: ProbeServer | None = None
    try:
        probes = await _start_probes(
            settings, lambda: accepting and connection.is_connected, strict_metrics_port
        )
        for svc in services:
            await svc.start(broker)
            started.append(svc)
        # Subscribers start last: a queued durable task is fetched at once, and its worker calls must find every
        # service of this process ready (a handler of a service not started yet cannot answer).
        await broker.start()
        for server in servers:
            await server.start()
        accepting = True
        log.info("services started", services=[s.name for s in services], nats=settings.nats_url)
        yield broker
    finally:
        accepting = False
        await drain(services, servers)
        for svc in reversed(started):  # before the connection closes: services may flush state to NATS
            await svc.stop()
        await broker.stop()
        if probes is not None:
            await probes.stop()
        log.info("services stopped", services=[s.name for s in started])


async def drain(services: Sequence[Service], servers: Sequence[EndpointServer]) -> None:
    """Stop taking messages service by service, in the order given (upstream first: ``SERVICES`` lists the
    executor first), each service's endpoints and subscribers at once, each waiting up to the drain timeout for its
    in-flight handlers.

    FastStream's ``broker.stop()`` stops every subscriber at once; in one process (`serve all`) the worker adapter
    would then unsubscribe while the executor still waits on its calls, failing tasks that could have finished.
    """
    for svc, server in zip(services, servers, strict=True):
        await asyncio.gather(server.stop(), *(sub.stop() for sub in svc.router.subscribers))


async def _start_probes(
    settings: CommonSettings, ready: Callable[[], bool], strict: bool
) -> ProbeServer | None:
    if settings.metrics_port is None:
        return None
    probes = ProbeServer(settings.metrics_host, settings.metrics_port, ready, strict=strict)
    await probes.start()
    return probes
