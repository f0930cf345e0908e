"""structlog configured once per process: human output on a TTY, JSON lines otherwise; context from contextvars."""

from __future__ import annotations

import contextvars
import logging
import sys

import structlog

from conductor import tracing

_configured = False
_min_level = logging.NOTSET  # what configure_logging let through; unconfigured, structlog writes every level


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Idempotent. ``json=None`` picks JSON when stderr is not a terminal (containers, CI)."""
    global _configured, _min_level
    if _configured:
        return
    _configured = True
    _min_level = logging.getLevelName(level.upper())
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


def info_enabled() -> bool:
    """Whether info lines are written. An info line on a per-request path is guarded by it: a filtered line costs
    nothing to write, but its arguments are still built and the logger proxy still resolved on every request."""
    return _min_level <= logging.INFO


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)


class bound_contextvars:  # lower case: a drop-in for ``structlog.contextvars.bound_contextvars``
    """``with bound_contextvars(task_id=...)``: these keys in every log line inside the block, as structlog's own
    context manager, for a fraction of its cost on a per-request path (structlog's copies the whole context to
    save what it overrides; here each variable's token restores it)."""

    __slots__ = ("_kw", "_tokens")

    def __init__(self, **kw: object) -> None:
        self._kw = kw

    def __enter__(self) -> None:
        tokens = []
        for key, value in self._kw.items():
            var = _VARS.get(key)
            if (
                var is None
            ):  # structlog's own variable for the key, learnt from the token of its first binding
                token = structlog.contextvars.bind_contextvars(**{key: value})[key]
                _VARS[key] = token.var
            else:
                token = var.set(value)
            tokens.append(token)
        self._tokens = tokens

    def __exit__(self, *exc: object) -> None:
        for token in reversed(self._tokens):
            token.var.reset(token)


# Key -> the ContextVar structlog keeps for it (``structlog.contextvars`` makes one per key, once, and merges every
# one into a log line): set directly, without building its name per binding.
_VARS: dict[str, contextvars.ContextVar[object]] = {}
