"""Process-level runtime choices of a `conductor serve` process: the event loop and the garbage collector.

Both were measured on the throughput benchmark (bench/throughput_bench.py, 5,000 tasks in flight, 1 s workers):

- **Garbage collector.** Each task in flight keeps a few hundred live objects (coroutines, futures, messages), and
  CPython 3.11's default thresholds (700, 10, 10) then run a full collection every couple of seconds, each one
  walking every live object: 24 full collections took 42% of the executor's CPU and stalled its event loop for
  ~200 ms at a time. After start-up everything already allocated is frozen out of the collector's view
  (``gc.freeze()``: modules, pools, compiled schemas never die) and the thresholds become (200000, 20, 1000).
  Young collections then run when the live set grows by 200,000 objects, which under a steady load is rare (at
  50,000 they still took 8-13% of CPU while 5,000 tasks were in flight; at 200,000, under 1%). Full collections
  come from a timer instead, once a minute (``CONDUCTOR_GC_FULL_EVERY_S``, 0 = never), so cyclic garbage that
  reached the old generation is still freed: one pause of ~0.2 s a minute at 5,000 tasks in flight.
  ``CONDUCTOR_GC`` = ``"a,b,c"`` sets other thresholds; ``python`` keeps CPython's and no timer runs.
- **Event loop.** uvloop (libuv) when it is installed, which it is with the package on Linux and macOS: its
  call_soon, timers and socket writes cost less than asyncio's, about 10-20% of a worker call's CPU here.
  ``CONDUCTOR_EVENT_LOOP=asyncio`` keeps the standard loop.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine, Mapping
from typing import Annotated, Any, TypeVar

import msgspec

from conductor.settings import Env, Seconds, SettingsError, lowercase, number, read

T = TypeVar("T")

DEFAULT_GC_THRESHOLDS = (200_000, 20, 1000)
DEFAULT_FULL_GC_EVERY_S = 60.0


ProcessSettingsError = SettingsError
"""A process-level setting in the environment is malformed; the message names the variable."""


def gc_thresholds(raw: str) -> tuple[int, int, int] | None:
    """``CONDUCTOR_GC``: three integers "a,b,c" (each bounded by the field's type), or ``python``."""
    if raw.strip().lower() == "python":
        return None
    parts = raw.split(",")
    if len(parts) != 3:
        raise ValueError('expected three integers "a,b,c" or "python"')
    a, b, c = (int(number(int, p)) for p in parts)
    return a, b, c


Threshold = Annotated[int, msgspec.Meta(ge=1)]


class ProcessSettings(msgspec.Struct, frozen=True, kw_only=True):
    gc_thresholds: Annotated[
        tuple[Threshold, Threshold, Threshold] | None,
        Env(
            "CONDUCTOR_GC",
            'Garbage-collector thresholds "a,b,c" set after start-up (everything before is frozen); `python` keeps '
            "CPython's own and runs no timer.",
            parse=gc_thresholds,
        ),
    ] = DEFAULT_GC_THRESHOLDS
    full_gc_every_s: Annotated[
        Seconds,
        Env("CONDUCTOR_GC_FULL_EVERY_S", "A full collection this often, with tuned thresholds; 0: never."),
    ] = DEFAULT_FULL_GC_EVERY_S
    event_loop: Annotated[
        str,
        msgspec.Meta(pattern="^(auto|uvloop|asyncio)$"),
        Env("CONDUCTOR_EVENT_LOOP", "auto (uvloop when installed), uvloop or asyncio.", parse=lowercase),
    ] = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ProcessSettings:
        return read(cls, env)


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


def settle_gc(settings: ProcessSettings) -> asyncio.Task[None] | None:
    """Call once start-up is over (services started), inside the running loop: freeze what exists, apply the
    thresholds, and start the full-collection timer (returned; cancel it on shutdown)."""
    if settings.gc_thresholds is None:
        return None
    gc.collect()
    gc.freeze()
    gc.set_threshold(*settings.gc_thresholds)
    if not settings.full_gc_every_s:
        return None
    return asyncio.get_running_loop().create_task(_collect_every(settings.full_gc_every_s))


async def _collect_every(seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        gc.collect()
