"""A real nats-server with the authorization of conductor/access.py (a NATS user per role and per tenant, generated
passwords), as `demo`, `serve all` and `eval` start it, and the services running on it, each as its own user."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest

from conductor.app.runtime import create_services, running
from conductor.credentials import password_key
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings

SERVICES = ["executor", "planner", "worker-adapter", "verifier", "gateway"]
TENANTS = (
    "acme",
    "beta",
)  # two tenants besides `client` and the gateway (CONDUCTOR_TENANTS), tests/access/test_tenants.py


@dataclass(frozen=True)
class Secured:
    server: NatsServer
    env: dict[
        str, str
    ]  # NATS_URL and CONDUCTOR_NATS_CREDENTIALS, as the commands hand them to their services

    def url(self, user: str) -> str:
        """A URL that logs in as ``user`` (the way an operator's or an attacker's plain client would)."""
        assert self.server.passwords is not None
        return f"nats://{user}:{self.server.passwords[user]}@127.0.0.1:{self.server.port}"

    def log(self) -> str:
        return Path(self.server.log_path).read_text(errors="replace")

    async def connect(self, user: str, errors: list[str] | None = None) -> nats.NATS:
        """A plain nats-py client as ``user`` with its own inbox prefix; permission errors collected in ``errors``."""

        async def on_error(exc: Exception) -> None:
            if errors is not None:
                errors.append(str(exc))

        return await nats.connect(
            self.url(user), inbox_prefix=f"_INBOX.{user}", error_cb=on_error, max_reconnect_attempts=0
        )


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    with NatsServer.secured(tenants=TENANTS) as server:
        assert server.credentials_file is not None
        assert server.credentials_file.stat().st_mode & 0o777 == 0o600
        assert password_key("worker-adapter") in server.credentials_file.read_text()
        yield Secured(server=server, env=server.env())


GATEWAY_PORT = free_port()


@contextlib.asynccontextmanager
async def services_on(secured: Secured, **extra: str) -> AsyncIterator[CommonSettings]:
    """Every service in this process, as `serve all,gateway` runs them: one connection each, as its own user."""
    env = {
        **secured.env,
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS": "true",
        "CONDUCTOR_GATEWAY_PORT": str(GATEWAY_PORT),
        **extra,
    }
    settings = CommonSettings.from_env(env)
    async with running(create_services(SERVICES, env), settings, name="access-test"):
        yield settings


@pytest.fixture
async def services(secured: Secured) -> AsyncIterator[CommonSettings]:
    async with services_on(secured) as settings:
        yield settings
