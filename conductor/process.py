"""Process-level runtime choices of a `conductor serve` process: the event loop and the garbage collector.

Both were measured on the throughput benchmark (bench/throughput_bench.py, 5,000 tasks in flight, 1 s workers):

- **Garbage collector.** Each task in flight keeps a few hundred live objects (coroutines, futures, messages), and
  CPython 3.11's default thresholds (700, 10, 10) then run a full collection every couple of seconds, each one
  walking every live object: 24 full collections took 42% of the executor's CPU and stalled its event loop for
  ~200 ms at a time. After start-up everything already allocated is frozen out of the collector's view
  (``gc.freeze()``: modules, pools, compiled schemas never die) and the thresholds become (50000, 20, 10): young
  collections are rarer and cheaper per object, and a full collection still runs, every 10,000,000 allocations
  or so, so cyclic garbage stays bounded. ``CONDUCTOR_GC`` = ``"a,b,c"`` sets other thresholds, ``python``
  keeps CPython's.
- **Event loop.** uvloop (libuv) when it is installed, which it is with the package on Linux and macOS: its
  call_soon, timers and socket writes cost less than asyncio's, about 10-20% of a worker call's CPU here.
  ``CONDUCTOR_EVENT_LOOP=asyncio`` keeps the standard loop.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

DEFAULT_GC_THRESHOLDS = (50_000, 20, 10)


class ProcessSettingsError(ValueError):
    """A process-level setting in the environment is malformed; the message names the variable."""


class ProcessSettings(msgspec.Struct, frozen=True, kw_only=True):
    gc_thresholds: tuple[int, int, int] | None = DEFAULT_GC_THRESHOLDS  # None: CPython's own
    event_loop: str = "auto"  # auto (uvloop when installed), uvloop, asyncio

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProcessSettings:
        return cls(
            gc_thresholds=_gc(env.get("CONDUCTOR_GC")), event_loop=_loop(env.get("CONDUCTOR_EVENT_LOOP"))
        )


def _gc(value: str | None) -> tuple[int, int, int] | None:
    if value is None or not value.strip():
        return DEFAULT_GC_THRESHOLDS
    if value.strip().lower() == "python":
        return None
    try:
        a, b, c = (int(x) for x in value.split(","))
    except ValueError as exc:
        raise ProcessSettingsError(
            f'CONDUCTOR_GC must be three integers "a,b,c" or "python", got {value!r}'
        ) from exc
    if a < 1 or b < 1 or c < 1:
        raise ProcessSettingsError(f"CONDUCTOR_GC thresholds must be >= 1, got {value!r}")
    return a, b, c


def _loop(value: str | None) -> str:
    choice = (value or "auto").strip().lower()
    if choice not in {"auto", "uvloop", "asyncio"}:
        raise ProcessSettingsError(f"CONDUCTOR_EVENT_LOOP must be auto, uvloop or asyncio, got {value!r}")
    return choice


def loop_name(settings: ProcessSettings) -> str:
    """The loop ``run`` will use: ``uvloop`` or ``asyncio``; raises when uvloop is demanded but missing."""
    if settings.event_loop == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError as exc:
        if settings.event_loop == "uvloop":
            raise ProcessSettingsError("CONDUCTOR_EVENT_LOOP=uvloop but uvloop is not installed") from exc
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T], settings: ProcessSettings) -> T:
    """``asyncio.run`` on the chosen loop."""
    if loop_name(settings) == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def settle_gc(settings: ProcessSettings) -> None:
    """Call once start-up is over (services started): freeze what exists, then apply the thresholds."""
    if settings.gc_thresholds is None:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(*settings.gc_thresholds)
