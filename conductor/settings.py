"""Settings shared by every service, read once at start-up from the environment (never at import time)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_METRICS_PORT = 9464  # the OpenTelemetry Prometheus exporter's port


class CommonSettings(msgspec.Struct, frozen=True, kw_only=True):
    nats_url: str = DEFAULT_NATS_URL
    log_level: str = "INFO"
    log_json: bool | None = None  # None: JSON when stderr is not a TTY
    subject_prefix: str = ""  # prepended to every subject; tests use one per test to stay isolated
    pool_file: Path | None = None  # None: the bundled demo pool
    max_payload_bytes: int = 1_048_576  # requests larger than this get payload_too_large
    request_timeout_s: float = 600.0  # how long a service waits on another service's reply
    # Messages a subscriber handles at once. FastStream's NATS default is 1 (strictly sequential), which would
    # serialise every task in an executor; each subscriber passes this as ``max_workers``.
    handler_concurrency: int = 1024
    drain_timeout_s: float = 30.0  # on shutdown, how long in-flight handlers may finish before being cancelled
    # HTTP /metrics, /healthz, /readyz. None (library use, tests) serves nothing; `conductor serve` defaults it to
    # DEFAULT_METRICS_PORT unless CONDUCTOR_METRICS_PORT is 0 or "off".
    metrics_port: int | None = None
    metrics_host: str = "0.0.0.0"  # probes come from the kubelet and scrapes from Prometheus: not only localhost

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommonSettings:
        env = os.environ if env is None else env
        log_json = env.get("CONDUCTOR_LOG_JSON")
        pool = env.get("CONDUCTOR_POOL")
        return cls(
            nats_url=env.get("NATS_URL", DEFAULT_NATS_URL),
            log_level=env.get("CONDUCTOR_LOG_LEVEL", "INFO"),
            log_json=None if log_json is None else log_json.lower() in {"1", "true", "yes"},
            subject_prefix=env.get("CONDUCTOR_SUBJECT_PREFIX", ""),
            pool_file=Path(pool) if pool else None,
            max_payload_bytes=int(env.get("CONDUCTOR_MAX_PAYLOAD_BYTES", "1048576")),
            request_timeout_s=float(env.get("CONDUCTOR_REQUEST_TIMEOUT_S", "600")),
            handler_concurrency=int(env.get("CONDUCTOR_HANDLER_CONCURRENCY", "1024")),
            drain_timeout_s=float(env.get("CONDUCTOR_DRAIN_TIMEOUT_S", "30")),
            metrics_port=metrics_port(env.get("CONDUCTOR_METRICS_PORT")),
            metrics_host=env.get("CONDUCTOR_METRICS_HOST", "0.0.0.0"),
        )

    def subject(self, name: str) -> str:
        return f"{self.subject_prefix}{name}" if self.subject_prefix else name


def metrics_port(value: str | None) -> int | None:
    """``CONDUCTOR_METRICS_PORT``: unset, empty, ``0`` or ``off`` mean no HTTP endpoint."""
    if value is None or value.strip().lower() in {"", "0", "off", "false", "no"}:
        return None
    return int(value)
