"""Where a local client (``conductor demo``, ``conductor eval``) finds the services: the ones already running at
``NATS_URL``, or a nats-server and every service started in this process.

One code path for both commands, so "it works in the demo" means the eval's embedded mode works too.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conductor.app.runtime import create_services, running, service_names
from conductor.natsserver import NatsServer, reachable
from conductor.settings import CommonSettings


@dataclass(frozen=True)
class Stack:
    settings: CommonSettings  # NATS URL and subject prefix the client should use
    env: dict[str, str]  # the environment the services (if any) were built from
    embedded_nats: bool  # a nats-server was started for this process
    services_started: bool  # the services run in this process (else: they were already running)


Mode = Literal["auto", "services", "private"]


@contextlib.asynccontextmanager
async def local_stack(
    env: Mapping[str, str], *, name: str, mode: Mode = "auto", pool: Path | None = None
) -> AsyncIterator[Stack]:
    """``mode``: ``auto`` uses the services at ``NATS_URL`` when a server is reachable there, else starts a
    nats-server and the services here; ``services`` always starts the services here, on the reachable server or an
    embedded one (the demo); ``private`` always starts both, never touching a server someone else runs.
    ``pool`` is the pool file of services started here (``CONDUCTOR_POOL``); running services keep their own."""
    env = {**env, "CONDUCTOR_LOG_LEVEL": env.get("CONDUCTOR_LOG_LEVEL", "WARNING")}
    if pool is not None:
        env["CONDUCTOR_POOL"] = str(pool)
    up = mode != "private" and reachable(CommonSettings.from_env(env).nats_url)
    with contextlib.ExitStack() as exits:
        if not up:
            common = CommonSettings.from_env(env)  # a NATS user per service and tenant (conductor/access.py)
            env |= exits.enter_context(
                NatsServer.secured(prefix=common.subject_prefix, tenants=common.tenants)
            ).env()
        settings = CommonSettings.from_env(env)
        if mode == "auto" and up:
            yield Stack(settings=settings, env=env, embedded_nats=False, services_started=False)
            return
        services = create_services(service_names("all"), env)  # every setting checked before anything starts
        async with running(services, settings, name=name):
            yield Stack(settings=settings, env=env, embedded_nats=not up, services_started=True)
