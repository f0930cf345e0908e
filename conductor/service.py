"""The shape every service shares, so one process can run one service (`serve planner`) or all five (`serve all`).

A service has request/reply ``endpoints`` (``conductor.endpoints.serve(contract, handler, ...)`` for each contract
it answers; the contract in ``schemas/`` names the subject and the queue group replicas share), a ``NatsRouter`` for subscribers FastStream serves itself (the durable JetStream
intake; empty for most services), and ``start``/``stop`` hooks for its resources (HTTP clients, process pools,
models). ``conductor.app.runtime.running`` serves the endpoints of the requested services on one connection and
includes their routers into one broker.

Handlers follow one pattern (see any ``services/*/app.py``): a typed ``async (Request) -> Reply`` function that
calls the pure core; ``serve`` decodes, rejects bad input with a typed error reply naming the field, counts it, and
encodes.
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import Protocol

from faststream.nats import NatsBroker, NatsRouter

from conductor.endpoints import Endpoint, faststream_router


class StartupError(RuntimeError):
    """A service cannot start for a reason only an operator can fix (a port in use, a policy endpoint that is down
    or does not serve the model); raised by ``start``, the message names the thing. `serve` prints it as one line
    and exits 2."""


def unbound(setting: str, host: str, port: int, exc: OSError) -> StartupError:
    """A listening socket that could not be had, as one line naming the setting that chose it."""
    why = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror or exc})"
    return StartupError(f"{setting}={port}: {host}:{port} {why}")


class Puller(Protocol):
    """Work a service fetches for itself instead of being handed it (the executor's rollouts,
    services/executor/rollout_queue.py). A service lists its pullers in ``pullers`` once started; the runtime starts
    them after every service and endpoint is up, and drains them with the service's endpoints."""

    async def start(self) -> bool:
        """Begin fetching; False when it cannot (the service then serves without it, as it logs)."""

    async def stop(self, drain_timeout_s: float) -> None:
        """Fetch nothing more; let what runs finish within ``drain_timeout_s``; give back the rest."""


def pullers(svc: Service) -> Sequence[Puller]:
    """A service's pullers (most services have none, and no such attribute)."""
    return getattr(svc, "pullers", ())


class Service(Protocol):
    name: str
    endpoints: Sequence[Endpoint]
    router: NatsRouter

    async def start(self, broker: NatsBroker) -> None:
        """Acquire resources; the broker is connected. Outgoing requests go through ``broker``. Raises
        ``StartupError`` when something outside the process is unfit to serve with."""

    async def stop(self) -> None:
        """Release resources; called after subscribers stopped taking messages."""


def full_router(svc: Service, *, max_workers: int = 1024) -> NatsRouter:
    """Everything a service answers as one FastStream router: its endpoints and its own subscribers. For the
    AsyncAPI document and FastStream's in-memory test broker; production serves endpoints with ``EndpointServer``."""
    router = faststream_router(svc.endpoints, max_workers=max_workers)
    router.include_router(svc.router)
    return router
