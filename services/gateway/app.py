"""Gateway service: an OpenAI-compatible HTTP door (``/v1/chat/completions``, ``/v1/models``) in front of the
solve subject, so any OpenAI client talks to the Conductor as if it were one model. It answers no NATS subject:
it is a client of the public solve API, served by aiohttp on the process's own event loop."""

from __future__ import annotations

from collections.abc import Mapping

import nats.js.errors as js_errors
import structlog
from aiohttp import web
from faststream.nats import NatsBroker, NatsRouter
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from conductor.endpoints import Endpoint
from conductor.pool import Pool, load_pool
from conductor.service import unbound
from schemas.tasks import Names
from services.gateway.bus import Bus
from services.gateway.calls import Calls
from services.gateway.config import GatewaySettings
from services.gateway.errors import openai_errors
from services.gateway.keys import KeyRing
from services.gateway.quota import Quotas
from services.gateway.routes import metered, routes
from services.gateway.serving import Serving

log = structlog.get_logger("conductor.gateway")


class GatewayService:
    name = "gateway"

    def __init__(
        self, settings: GatewaySettings, pool: Pool | None = None, keys: KeyRing | None = None
    ) -> None:
        self.settings = settings
        self.pool = pool or load_pool(settings.common.pool_file)
        # Read at construction, so a missing or malformed keys file stops `serve` before anything starts.
        self.keys = (
            keys
            if keys is not None
            else (
                KeyRing.load(settings.keys_file, reserve_usd=settings.reserve_usd)
                if settings.keys_file
                else None
            )
        )
        self.endpoints: list[Endpoint] = []
        self.router = NatsRouter()
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self.bus: Bus | None = None
        self.calls: Calls | None = None

    async def start(self, broker: NatsBroker) -> None:
        nc = broker.connection
        quotas = None
        if self.keys is not None:
            quotas = Quotas(await _quota_bucket(nc.jetstream(), self.settings.common.subject_prefix))
        bus = self.bus = Bus(nc, self.settings.common)
        self.calls = Calls(self.settings, quotas, bus)
        serving = Serving(self.calls, bus, [w.name for w in self.pool.workers])
        app = web.Application(
            client_max_size=self.settings.max_body_bytes, middlewares=[metered, openai_errors]
        )
        app.add_routes(routes(serving, self.keys, self.settings))
        # keepalive_timeout is aiohttp's only bound on reading headers: it runs from the connection's start and
        # from the end of each response, and partial header bytes do not extend it (a slow-loris client is closed).
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            handler_cancellation=True,
            keepalive_timeout=self.settings.header_timeout_s,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise unbound("CONDUCTOR_GATEWAY_PORT", self.settings.host, self.settings.port, exc) from None
        self.port = int(self._runner.addresses[0][1])
        log.info("gateway listening", host=self.settings.host, port=self.port, keys=len(self.keys or ()))

    async def stop(self) -> None:
        if self._runner is not None:
            await (
                self._runner.cleanup()
            )  # stops listening, then waits for in-flight requests (aiohttp's shutdown)
            self._runner = None
        if self.calls is not None:
            await self.calls.stop()
            self.calls = None


async def _quota_bucket(js: JetStreamContext, prefix: str) -> KeyValue:
    name = Names.for_prefix(prefix).gateway_quota_bucket
    try:
        return await js.key_value(name)
    except js_errors.BucketNotFoundError:
        return await js.create_key_value(bucket=name, history=1, description="gateway per-key rate and spend")


def create_service(env: Mapping[str, str] | None = None) -> GatewayService:
    return GatewayService(GatewaySettings.from_env(env))
