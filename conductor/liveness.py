"""Liveness and deadlines on request/reply: a requester learns in seconds that its responder died, and a responder
never starts (or keeps paying for) work whose requester has given up.

One request header, ``Conductor-Call: <beat seconds>;<deadline>`` (either part may be empty), optional, so plain
NATS clients are served exactly as before:

- the beat period — "tell me you are still working". The serving side then publishes an empty message carrying a
  ``Conductor-Beat`` header to the request's reply subject every that many seconds while the request is queued or
  running. The requester treats ``misses`` beat periods of silence as a lost responder (a SIGKILLed
  replica, a partition) and fails over, instead of waiting out a call timeout sized for the slowest live provider
  (15 minutes). A beat is only sent once a request is older than one period, so fast calls cost nothing extra.
- the deadline, in unix seconds — when the requester stops caring. The serving side drops a request whose
  deadline passed while it was queued (typed ``timeout``, nothing run, nothing paid), cancels one still running at
  its deadline, and exposes the deadline to the handler (``current_deadline()``) so that nested requests carry it on
  and retry loops stop starting new paid calls. Deadlines are wall-clock instants: hosts' clocks must agree to well
  within a call's duration (the call ledger already assumes this for its leases).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import time
from collections.abc import Mapping

import msgspec
import nats.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

log = structlog.get_logger("conductor.liveness")

CALL_HEADER = (
    "Conductor-Call"  # on requests: "<beat_s>;<deadline>" (one short header: nats-py parses each by hand)
)
BEAT_HEADER = "Conductor-Beat"  # on beat messages
MIN_BEAT_S = 0.05  # a requester cannot make a server beat faster than this
WIND_DOWN_S = 5.0
"""How long a handler that opts in (the executor's solve) may run past its requester's deadline to stop on its own
and answer with what ran — its usage, so that a requester settling what it spent can (issue 34): at the deadline it
starts no further call, and the calls it made carry the deadline, so they end then too. A requester that wants that
answer waits this much longer than its deadline; after it, the watch cancels the handler."""
WATCH_TICK_S = 0.25  # how often a server's watch looks at its requests (beats due, deadlines passed)

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("conductor_deadline", default=None)


class ResponderLost(TimeoutError):
    """No reply and no beat for ``misses`` beat periods: the responder died or became unreachable mid-request.

    A ``TimeoutError``, so code that treats any timeout as "not answered" keeps working; code that can fail over
    (another replica, a restarted one) catches this one first."""


def current_deadline() -> float | None:
    """The deadline (unix seconds) of the request being served in this task, if its requester sent one."""
    return _deadline.get()


def set_deadline(deadline: float | None) -> contextvars.Token[float | None]:
    return _deadline.set(deadline)


def reset_deadline(token: contextvars.Token[float | None]) -> None:
    _deadline.reset(token)


def earliest(*deadlines: float | None) -> float | None:
    known = [d for d in deadlines if d is not None]
    return min(known) if known else None


def remaining_s(deadline: float | None, now: float | None = None) -> float | None:
    """Seconds left before ``deadline`` (negative once past), or None without one."""
    if deadline is None:
        return None
    return deadline - (time.time() if now is None else now)


def expired(deadline: float | None, now: float | None = None) -> bool:
    left = remaining_s(deadline, now)
    return left is not None and left <= 0


def request_headers(beat_s: float | None, deadline: float | None) -> dict[str, str] | None:
    if beat_s is None and deadline is None:
        return None
    beat = "" if beat_s is None else f"{beat_s:g}"
    return {CALL_HEADER: beat if deadline is None else f"{beat};{deadline:.3f}"}


def _number(text: str) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


class CallHeaderError(ValueError):
    """A ``Conductor-Call`` deadline that is not a finite number: the request is answered with ``bad_request``."""


def parse_call(headers: Mapping[str, str] | None) -> tuple[float | None, float | None]:
    """(beat period, deadline) a request asks for; absent parts, and a malformed beat, are None (a plain client).
    A deadline given but not a finite number (``nan``, ``inf``, text) is ``CallHeaderError``: nothing can be
    compared with NaN, and a request that names a deadline must not run as if it had none (issue 34)."""
    value = headers.get(CALL_HEADER) if headers else None
    if value is None:
        return None, None
    beat_text, _, deadline_text = value.partition(";")
    beat = _number(beat_text)
    deadline = _number(deadline_text.strip())
    if deadline_text.strip() and (deadline is None or not math.isfinite(deadline)):
        raise CallHeaderError(
            f"the {CALL_HEADER} header's deadline {deadline_text.strip()[:40]!r} is not a finite number of unix "
            "seconds"
        )
    beat = beat if beat is not None and math.isfinite(beat) else None
    return (max(beat, MIN_BEAT_S) if beat is not None and beat > 0 else None), deadline


def is_beat(headers: Mapping[str, str] | None) -> bool:
    return bool(headers) and BEAT_HEADER in headers  # type: ignore[operator]


class CallPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How a requester keeps track of its responder: a beat every ``beat_s``, lost after ``beat_misses`` silent
    periods; a lost or missing responder (no responders: a restart in progress) is tried again with backoff
    (``retry_base_s`` doubling to ``retry_max_s``) for up to ``failover_s``, never past the call's deadline."""

    beat_s: float = 2.0
    beat_misses: int = 3
    failover_s: float = 30.0
    retry_base_s: float = 0.25
    retry_max_s: float = 4.0


class Watched:
    """One request a server watches: when its next beat is due, when its requester stops waiting."""

    __slots__ = ("deadline", "expired", "next_beat", "period", "reply", "task")

    def __init__(
        self, reply: str, period: float | None, deadline: float | None, task: asyncio.Task[None]
    ) -> None:
        self.reply, self.period, self.deadline, self.task = reply, period, deadline, task
        self.next_beat = asyncio.get_running_loop().time() + period if period is not None else float("inf")
        self.expired = False  # set when the watch cancelled the request at its deadline


class Watch:
    """Beats and deadline cancellations for every request of one server, from one loop.

    One loop instead of a timer (or two) per request: a request that finishes within a tick costs a set insertion
    and removal, and the loop's work grows with the requests in flight, not with the request rate. Deadlines are
    enforced to within a tick; the check before a queued request starts is exact."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._watched: set[Watched] = set()
        self._tick = WATCH_TICK_S
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run(), name="conductor-liveness-watch")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    def watch(self, reply: str, period: float | None, deadline: float | None) -> Watched:
        task = asyncio.current_task()
        assert task is not None
        watched = Watched(reply, period, deadline, task)
        if period is not None and period / 2 < self._tick:
            self._tick = max(period / 2, MIN_BEAT_S / 2)
        self._watched.add(watched)
        return watched

    def forget(self, watched: Watched) -> None:
        self._watched.discard(watched)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._tick)
            now, wall = loop.time(), time.time()
            for w in list(self._watched):
                if w.deadline is not None and wall >= w.deadline and not w.expired:
                    w.expired = True
                    w.task.cancel()
                elif w.reply and now >= w.next_beat:
                    w.next_beat = now + (w.period or 0.0)
                    await self._beat(w.reply)

    async def _beat(self, reply: str) -> None:
        try:
            await self._nc.publish(reply, b"", headers=_BEAT)
        except nats.errors.Error as exc:  # lost connection: the requester may fail over, which is the point
            log.debug("beat not sent", error=repr(exc))


_BEAT = {BEAT_HEADER: "1"}


class PendingCall:
    """One outstanding request on the requester's side: its reply future and, when it asked for beats, how long
    it may stay silent. One timer per call: a beat only notes when it was heard, and the timer, when it comes
    round, either fails the future (``TimeoutError`` at ``end``, ``ResponderLost`` after ``silence_s`` without a
    beat) or waits on to what the last beat allows. The waiting task is never cancelled for it."""

    __slots__ = ("end", "future", "heard_at", "silence_s", "timer", "what")

    def __init__(self, future: asyncio.Future[Msg], silence_s: float | None) -> None:
        self.future = future
        self.silence_s = silence_s
        self.timer: asyncio.TimerHandle | None = None
        self.end = 0.0
        self.heard_at = 0.0
        self.what = ""

    def heard(self) -> None:
        """A beat arrived: the responder lives; give it another ``silence_s``."""
        if self.silence_s is not None and not self.future.done():
            self.heard_at = asyncio.get_running_loop().time()

    def _due_at(self) -> float:
        return self.end if self.silence_s is None else min(self.end, self.heard_at + self.silence_s)

    def _due(self) -> None:
        self.timer = None
        if self.future.done():
            return
        loop = self.future.get_loop()
        due = self._due_at()
        if loop.time() < due:  # a beat came in the meantime
            self.timer = loop.call_at(due, self._due)
        elif due < self.end:
            lost = ResponderLost(f"no reply and no beat for {self.silence_s:g} s from {self.what}")
            self.future.set_exception(lost)
        else:
            self.future.set_exception(TimeoutError())

    def start(self, timeout: float, what: str) -> asyncio.Future[Msg]:
        """Start the call's clock (``what`` names the responder in ``ResponderLost``) and return the future to await:
        its reply; ``TimeoutError`` after ``timeout``, ``ResponderLost`` after ``silence_s`` without a beat. The
        waiter awaits the future itself (no coroutine of ours per call in flight) and calls ``close`` however it
        ends."""
        loop = self.future.get_loop()
        now = loop.time()
        self.end, self.heard_at, self.what = now + timeout, now, what
        self.timer = loop.call_at(self._due_at(), self._due)
        return self.future

    def close(self) -> None:
        """The call is over: its timer stops; an error the timer set just as the waiter was cancelled is retrieved
        (not logged as never retrieved)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.future.done() and not self.future.cancelled():
            self.future.exception()
