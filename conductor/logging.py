"""structlog configured once per process: human output on a TTY, JSON lines otherwise; context from contextvars."""

from __future__ import annotations

import logging
import sys

import structlog

from conductor import tracing

_configured = False


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Idempotent. ``json=None`` picks JSON when stderr is not a terminal (containers, CI)."""
    global _configured
    if _configured:
        return
    _configured = True
    if json is None:
        json = not sys.stderr.isatty()
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        tracing.add_trace_ids,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer] if json else [*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # FastStream and nats-py log through stdlib logging; keep them quiet unless asked.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)
