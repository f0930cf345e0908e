"""Which services exist and how to run a set of them in this process (`serve`, `demo`, end-to-end tests).

Each ``services/<name>/app.py`` exposes ``create_service(env) -> Service``; this module is the only place that
knows the list, so the CLI and tests never reach into a service's internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import nats.errors
from faststream.nats import NatsBroker
from nats.aio.client import Client

from conductor.broker import make_broker
from conductor.client import refused
from conductor.credentials import connection, redacted, refusal
from conductor.endpoints import EndpointServer
from conductor.logging import configure_logging, get_logger
from conductor.probes import ProbeServer
from conductor.service import Service, pullers
from conductor.settings import CommonSettings

SERVICES: dict[str, str] = {
    "executor": "services.executor.app",
    "planner": "services.planner.app",
    "worker-adapter": "services.worker_adapter.app",
    "verifier": "services.verifier.app",
    "gateway": "services.gateway.app",
    "learner": "services.learner.app",
}
ON_REQUEST = frozenset({"gateway", "learner"})
"""Services `all` leaves out: the HTTP gateway opens a port and needs API keys, and the learner needs the `learner`
extra (torch, TRL) and accelerators, so each is asked for by name (`serve gateway`, `serve all,learner`)."""


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
    """Connect each service on its own broker as its own NATS user, start every service's resources, then its
    subscribers; undo it all on exit. Yields the first service's broker.

    One connection per service, even in one process (`serve all`): each user may do only what its role may
    (conductor/access.py), so a bug or a compromise in one service cannot act on the bus as another.
    With ``settings.metrics_port`` set, ``/metrics``, ``/healthz`` and ``/readyz`` are served from the start
    (health during a slow start-up), ready once every service started and while every connection is up.
    """
    configure_logging(settings.log_level, json=settings.log_json)
    log = get_logger("conductor.app.runtime")
    async with contextlib.AsyncExitStack() as stack:
        brokers = []
        for svc in services:
            broker = make_broker(settings, name=svc.name)
            broker.include_router(svc.router)
            stack.push_async_callback(
                broker.stop
            )  # last out: services may flush state to NATS when they stop
            brokers.append(broker)
        connections = [
            await _connect(broker, settings, svc.name) for svc, broker in zip(services, brokers, strict=True)
        ]
        servers = [
            EndpointServer(
                connection,
                svc.endpoints,
                concurrency=settings.handler_concurrency,
                drain_timeout_s=settings.drain_timeout_s,
            )
            for svc, connection in zip(services, connections, strict=True)
        ]
        accepting = False

        def ready() -> bool:
            return accepting and all(c.is_connected for c in connections)

        probes = await _start_probes(settings, ready, strict_metrics_port)
        if probes is not None:
            stack.push_async_callback(probes.stop)
        started: list[Service] = []
        try:
            for svc, broker in zip(services, brokers, strict=True):
                await svc.start(broker)
                started.append(svc)
            # Subscribers start last: a queued durable task is fetched at once, and its worker calls must find every
            # service of this process ready (a handler of a service not started yet cannot answer).
            for broker in brokers:
                await broker.start()
            for server in servers:
                await server.start()
            for svc in services:  # work fetched, like work handed over, finds every service ready
                for puller in pullers(svc):
                    await puller.start()
            # Each service has its own connection: a request sent on one right after start-up must find the
            # others' subscriptions already at the server (one shared connection kept that order by itself).
            await asyncio.gather(*(c.flush() for c in connections))
            accepting = True
            log.info(
                "services started",
                process=name,
                services=[s.name for s in services],
                nats=redacted(settings.nats_url),
            )
            yield brokers[0]
        finally:
            accepting = False
            await drain(services, servers, settings.drain_timeout_s)
            for svc in reversed(started):  # before the connections close: services may flush state to NATS
                await svc.stop()
            if started:
                log.info("services stopped", services=[s.name for s in started])


async def _connect(broker: NatsBroker, settings: CommonSettings, role: str) -> Client:
    """The broker's connection; retried forever while NATS is unreachable (each attempt logged by the broker), but
    a refusal of the credentials is ``NatsUnreachableError`` at once: retrying cannot help."""
    try:
        return await broker.connect()
    except nats.errors.Error as exc:
        if (reason := refusal(exc)) is None:
            raise
        raise refused(connection(settings, role), reason) from None


async def drain(services: Sequence[Service], servers: Sequence[EndpointServer], timeout_s: float) -> None:
    """Stop taking messages service by service, in the order given (upstream first: ``SERVICES`` lists the
    executor first), each service's endpoints, subscribers and pullers at once, each waiting up to the drain timeout
    for its in-flight handlers.

    FastStream's ``broker.stop()`` stops every subscriber at once; in one process (`serve all`) the worker adapter
    would then unsubscribe while the executor still waits on its calls, failing tasks that could have finished.
    """
    for svc, server in zip(services, servers, strict=True):
        await asyncio.gather(
            server.stop(),
            *(sub.stop() for sub in svc.router.subscribers),
            *(p.stop(timeout_s) for p in pullers(svc)),
        )


async def _start_probes(
    settings: CommonSettings, ready: Callable[[], bool], strict: bool
) -> ProbeServer | None:
    if settings.metrics_port is None:
        return None
    probes = ProbeServer(settings.metrics_host, settings.metrics_port, ready, strict=strict)
    await probes.start()
    return probes
