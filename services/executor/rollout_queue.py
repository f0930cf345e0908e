"""Rollouts pulled by free capacity: the executor's side of the rollout work queue (schemas/rollout.py).

The queue group of ``conductor.rollout`` hands a batch to a random replica whatever its load, so a batch landing on
a full replica waits for its slots while another idles (bench/rollout_scaling_bench.py measured 1.6-2.9x for four
replicas). Here a replica asks the stream's one pull consumer for exactly as many items as it has free rollout
slots (``Rollouts.free``, shared with the request/reply batches), so an item only ever goes to a replica that can
start it at once, and a replica never holds more rollouts than its slots while another has free ones.

Accounting is exact: each pull request gets an inbox of its own, the items it asked for count as promised until
they arrive or the server ends the request (408 when it expires, 409 when refused), and at most ``MAX_PULLS``
requests are open at once.

Liveness, as for a request/reply batch (conductor/liveness.py, ``CallSettings``): while an item runs its replica
sends an in-progress acknowledgement every ``beat_s``, and the consumer's AckWait is ``beat_s x beat_misses`` (6 s
by default), so an item whose replica died is redelivered to another replica that has a free slot, its work redone
from the start (rollouts are not durable). An item already delivered ``MAX_RUNS`` times — its replica lost each time — is
answered masked (``reward`` unset) instead of run again. The outcome is published before the item is acknowledged:
a replica dying between the two gets the item run twice, and the sender keeps the first outcome per key.

Deadlines: an item fetched after its deadline is acknowledged unrun (nobody waits for it); one running at its
deadline is cancelled; nested calls carry it (``current_deadline``). Stopping (``stop``) stops pulling, gives back
at once (nak) whatever arrives meanwhile, lets the running items finish within the drain timeout and gives back
the rest, so another replica starts them without waiting out AckWait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import time

import nats.errors
import nats.js.api as js_api
import nats.js.errors as js_errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from conductor.endpoints import STATUS_HEADER
from conductor.liveness import expired, reset_deadline, set_deadline
from conductor.wire import WireError, decode, encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import (
    ROLLOUT_RESULTS,
    ROLLOUT_WORK,
    ROLLOUTS_CONSUMER,
    RolloutItem,
    RolloutOutcome,
    RolloutResult,
)
from schemas.tasks import Names
from services.executor.config import CallSettings
from services.executor.rollouts import Claim, Rollouts
from services.executor.store import ensure_stream

log = structlog.get_logger("conductor.executor.rollout_queue")

PULL_EXPIRY_S = 2.0  # how long one pull request waits on the server for items
MAX_PULLS = (
    4  # pull requests one replica keeps open at once (the consumer allows MAX_WAITING across replicas)
)
MAX_WAITING = 4096
MAX_RUNS = (
    5  # deliveries an item may run (a replica lost or stopped with it each time); the next is answered masked
)
STREAM_MAX_AGE_S = 3600.0  # an item nobody fetched within an hour: its sender gave up long ago
RETRY_PAUSE_S = 1.0  # after a pull that could not be sent or a consumer that went away


def stream_config(names: Names, prefix: str) -> js_api.StreamConfig:
    """Memory storage: rollouts are not durable (a lost item is sent again by its sender); work-queue retention: an
    acknowledged item is gone."""
    return js_api.StreamConfig(
        name=names.rollouts_stream,
        subjects=[prefix + ROLLOUT_WORK.subject(run=">")],
        retention=js_api.RetentionPolicy.WORK_QUEUE,
        storage=js_api.StorageType.MEMORY,
        max_age=STREAM_MAX_AGE_S,
    )


def consumer_config(calls: CallSettings) -> js_api.ConsumerConfig:
    """Redelivery is ours to bound (``MAX_RUNS``, by delivery count), not JetStream's."""
    return js_api.ConsumerConfig(
        name=ROLLOUTS_CONSUMER,
        durable_name=ROLLOUTS_CONSUMER,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=calls.beat_s * calls.beat_misses,
        max_deliver=-1,
        max_ack_pending=-1,
        max_waiting=MAX_WAITING,
    )


def lost(runs: int) -> ErrorInfo:
    return ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"the rollout's executor was lost {runs} times; not run again",
        retryable=True,
    )


class _Pull:
    """One open pull request: the items still promised to it, until when, and the inbox they arrive on."""

    __slots__ = ("done", "left", "sub", "until")

    def __init__(self, left: int, until: float) -> None:
        self.left, self.until, self.done = left, until, False
        self.sub: Subscription | None = None


class RolloutPuller:
    """Fetches rollout items for one replica's free slots and runs them through ``Rollouts`` (the same path, the
    same slots, as a request/reply batch)."""

    def __init__(
        self, nc: Client, rollouts: Rollouts, *, prefix: str, calls: CallSettings, max_bytes: int
    ) -> None:
        self._nc = nc
        self._rollouts = rollouts
        self._prefix = prefix
        self._calls = calls
        self._max_bytes = max_bytes
        self._names = Names.for_prefix(prefix)
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{self._names.rollouts_stream}.{ROLLOUTS_CONSUMER}"
        self._pulls: list[_Pull] = []
        self._running: dict[asyncio.Task[None], Msg] = {}
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._loop: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None
        self._stopping = False
        self._refused = (
            False  # the server refused a pull (consumer gone, no JetStream): declare again, then pull
        )
        rollouts.when_free(self._wake.set)

    async def start(self) -> bool:
        """Declare the stream and the consumer, then pull; False (and request/reply only) without JetStream."""
        await self._declare()
        if self._refused:
            log.warning("no rollout work queue (needs JetStream); rollouts by request/reply only")
            return False
        self._loop = asyncio.create_task(self._pull_loop(), name="conductor-rollout-pulls")
        self._beats = asyncio.create_task(self._beat_loop(), name="conductor-rollout-beats")
        return True

    @property
    def running(self) -> int:
        return len(self._running)

    async def stop(self, drain_timeout_s: float) -> None:
        """Stop pulling; finish what runs within ``drain_timeout_s``; give back the rest (see the module docstring)."""
        self._stopping = True
        self._wake.set()
        if self._loop is not None:
            await self._loop
            self._loop = None
        # Open pull requests go first: the server skips a request whose inbox nobody reads, so nothing given back
        # below comes straight back here.
        await self._close_pulls(everything=True)
        if self._running:
            _, still = await asyncio.wait(set(self._running), timeout=drain_timeout_s)
            for task in still:
                task.cancel()
            if still:
                log.warning("drain timed out; rollouts given back to the queue", rollouts=len(still))
                await asyncio.wait(still, timeout=1.0)
        if self._beats is not None:
            self._beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beats
            self._beats = None

    async def _pull_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping:
            await self._close_pulls()
            if self._refused:
                await self._declare()
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            want = self._rollouts.free - sum(p.left for p in self._pulls)
            if want > 0 and len(self._pulls) < MAX_PULLS and self._nc.is_connected:
                if not await self._pull(want):
                    await asyncio.sleep(RETRY_PAUSE_S)
                continue
            self._wake.clear()
            soonest = min((p.until for p in self._pulls), default=loop.time() + PULL_EXPIRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(soonest - loop.time(), 0.01))

    async def _declare(self) -> None:
        """The stream and the consumer, created or reconciled (idempotent across replicas)."""
        self._refused = False
        js, stream = self._nc.jetstream(), self._names.rollouts_stream
        try:
            await ensure_stream(js, stream_config(self._names, self._prefix))
            try:
                await js.add_consumer(stream, consumer_config(self._calls))
            except (
                js_errors.BadRequestError
            ) as exc:  # declared otherwise (another replica's settings): use it
                await js.consumer_info(stream, ROLLOUTS_CONSUMER)
                log.warning(
                    "the rollout consumer exists with another config; pulling from it", error=repr(exc)
                )
        except (js_errors.Error, nats.errors.Error) as exc:
            self._refused = True
            log.warning("rollout work queue not declared", error=repr(exc))

    async def _pull(self, n: int) -> bool:
        """Ask for ``n`` items on an inbox of this request's own (its items and its end status arrive there)."""
        grace = PULL_EXPIRY_S  # the server's 408 ends a request; this only covers one lost with a reconnect
        pull = _Pull(n, asyncio.get_running_loop().time() + PULL_EXPIRY_S + grace)
        inbox = self._nc.new_inbox()
        try:
            pull.sub = await self._nc.subscribe(inbox, cb=functools.partial(self._arrived, pull))
            self._pulls.append(pull)
            ask = {"batch": n, "expires": int(PULL_EXPIRY_S * 1e9)}
            await self._nc.publish(self._next, json.dumps(ask).encode(), reply=inbox)
        except nats.errors.Error as exc:
            log.warning("rollout pull not sent", error=repr(exc))
            pull.done = True
            return False
        return True

    async def _arrived(self, pull: _Pull, msg: Msg) -> None:
        """An item, or the status that ends its pull request. Never waits: the item runs as its own task."""
        status = msg.headers.get(STATUS_HEADER) if msg.headers else None
        if status is not None and not msg.data:
            if status != "100":  # 404/408: nothing (more) to hand out; 409: refused; 503: no JetStream there
                pull.done = True
                if status not in ("404", "408"):
                    log.warning(
                        "rollout pull refused", status=status, description=msg.headers.get("Description")
                    )
                    self._refused = True
                self._wake.set()
            return
        pull.left -= 1
        if pull.left <= 0:
            pull.done = True
        if self._stopping:
            with contextlib.suppress(nats.errors.Error):
                await msg.nak()  # to another replica at once
            return
        claim = self._rollouts.claim()  # counted now: the pull loop never asks for this slot again
        task = asyncio.create_task(self._run(msg, claim))
        self._running[task] = msg
        task.add_done_callback(self._running.pop)

    async def _run(self, msg: Msg, claim: Claim) -> None:
        try:
            async with claim:
                outcome = await self._outcome(msg)
        except asyncio.CancelledError:
            with contextlib.suppress(nats.errors.Error):
                await msg.nak()  # stopping: another replica runs it next, without waiting out AckWait
            raise
        except Exception:
            log.exception("rollout item failed; redelivered after AckWait", subject=msg.subject)
            return
        try:
            if outcome is not None:
                await self._nc.publish(self._results_subject(msg.subject), encode(outcome))
            await msg.ack()
        except nats.errors.Error as exc:  # lost connection: redelivered after AckWait, run again
            log.warning("rollout outcome not sent", error=repr(exc))

    async def _outcome(self, msg: Msg) -> RolloutOutcome | None:
        """The item's outcome, its slot held; None when nobody waits for one (undecodable, or past its deadline)."""
        try:
            item = decode(msg.data, RolloutItem, max_bytes=self._max_bytes)
        except WireError as exc:
            log.warning("undecodable rollout item dropped", subject=msg.subject, error=exc.info.message)
            return None
        r, runs = item.rollout, msg.metadata.num_delivered
        if expired(item.deadline):
            return None
        if runs > MAX_RUNS:
            log.warning("rollout lost with its executor too often; masked", rollout_id=r.id, runs=runs - 1)
            masked = RolloutResult(id=r.id, error=lost(runs - 1), policy_version=r.policy_version)
            return RolloutOutcome(key=item.key, result=masked)
        if (error := self._rollouts.check(r)) is not None:
            return RolloutOutcome(key=item.key, error=error)
        token = set_deadline(item.deadline)
        try:
            async with asyncio.timeout(None if item.deadline is None else item.deadline - time.time()):
                result = await self._rollouts.score(r)
        except TimeoutError:
            return None  # its sender stopped waiting: nothing to answer
        finally:
            reset_deadline(token)
        return RolloutOutcome(key=item.key, result=result)

    def _results_subject(self, work_subject: str) -> str:
        """The outcome goes to the run its item came from: the work subject's last token, within this replica's
        results subjects whatever that token holds."""
        run = work_subject.rsplit(".", 1)[-1]
        return self._prefix + ROLLOUT_RESULTS.subject(run=run)

    async def _beat_loop(self) -> None:
        """In-progress acknowledgements for every running item, one loop for all of them."""
        while True:
            await asyncio.sleep(self._calls.beat_s)
            for msg in list(self._running.values()):
                try:
                    await msg.in_progress()
                except (
                    nats.errors.Error
                ) as exc:  # lost connection: its item may be redelivered, which is the point
                    log.debug("in-progress ack not sent", error=repr(exc))

    async def _close_pulls(self, everything: bool = False) -> None:
        """Forget the pull requests that ended (answered, refused, expired) and drop their inboxes."""
        now = asyncio.get_running_loop().time()
        keep = []
        for pull in self._pulls:
            if everything or pull.done or pull.until <= now:
                if pull.sub is not None:
                    with contextlib.suppress(nats.errors.Error):
                        await pull.sub.unsubscribe()
            else:
                keep.append(pull)
        self._pulls = keep
