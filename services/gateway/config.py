"""Gateway settings, read once at start-up (``conductor.settings.read``; docs/settings.md lists them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import msgspec

from conductor.settings import CommonSettings, Env, PositiveSeconds, SettingsError, read

GatewaySettingsError = SettingsError
"""A malformed gateway setting: `serve` exits 2 naming it (the one settings error type, under the gateway's name)."""


class GatewaySettings(msgspec.Struct, frozen=True, kw_only=True):
    common: CommonSettings
    host: Annotated[
        str,
        Env(
            "CONDUCTOR_GATEWAY_HOST",
            "Address the HTTP door binds; a cluster sets 0.0.0.0, a laptop should not.",
        ),
    ] = "127.0.0.1"
    port: Annotated[
        int,
        msgspec.Meta(ge=0, le=65535),
        Env("CONDUCTOR_GATEWAY_PORT", "HTTP port of the door; 0 picks a free one."),
    ] = 8080
    keys_file: Annotated[
        Path | None,
        Env(
            "CONDUCTOR_GATEWAY_KEYS_FILE",
            "TOML of hashed API keys (`conductor gateway-key`); required unless anonymous access is allowed.",
        ),
    ] = None
    allow_anonymous: Annotated[
        bool,
        Env(
            "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS",
            "Local development only: every request is the key `anonymous`, with no limits.",
        ),
    ] = False
    max_body_bytes: Annotated[
        int,
        msgspec.Meta(ge=1024),
        Env(
            "CONDUCTOR_GATEWAY_MAX_BODY_BYTES",
            "Request bodies above this are refused with 413 before being read.",
        ),
    ] = 1_048_576
    reserve_usd: Annotated[
        float,
        msgspec.Meta(gt=0),
        Env(
            "CONDUCTOR_GATEWAY_RESERVE_USD",
            "Dollars a request of a spend-limited key holds while it runs, and its "
            "task's budget (a key's reserve_usd overrides it): the spend limit is then never overshot by more than "
            "the calls in flight when it is reached.",
        ),
    ] = 0.05
    body_timeout_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_GATEWAY_BODY_TIMEOUT_S",
            "A request body not read within this is refused with 408 (a slow "
            "client cannot hold a connection open).",
        ),
    ] = 10.0
    header_timeout_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_GATEWAY_HEADER_TIMEOUT_S",
            "A connection that has not sent a request's headers within this (of opening, or of its previous "
            "response) is closed: aiohttp's keep-alive timeout, which also bounds a slow-loris client that never "
            "finishes its headers.",
        ),
    ] = 10.0
    solve_timeout_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_GATEWAY_SOLVE_TIMEOUT_S",
            "How long a request waits for its task; the durable path survives longer.",
        ),
    ] = 600.0
    keepalive_s: Annotated[
        PositiveSeconds,
        Env(
            "CONDUCTOR_GATEWAY_KEEPALIVE_S",
            "SSE comment lines this often while a streamed task runs (proxies).",
        ),
    ] = 15.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        settings = read(cls, env)
        if settings.keys_file is None and not settings.allow_anonymous:
            raise GatewaySettingsError(
                "the gateway needs CONDUCTOR_GATEWAY_KEYS_FILE (see `conductor gateway-key`), or "
                "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS=true for local development"
            )
        return settings
