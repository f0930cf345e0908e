"""Idempotent worker calls keyed by (task_id, round, step): a resumed task never pays twice for a finished call.

The executor checkpoints after every step, so after a crash it re-sends at most the ``WorkRequest`` whose reply it
had not recorded. That call may have finished, or still be running on some replica. The ledger (KV bucket
``CONDUCTOR_CALLS``, key ``<task>.<round>.<step>``) makes the re-send cheap and safe:

1. In this process, duplicates share one in-flight future.
2. ``create`` a ``Running`` claim {owner, digest, lease_until}. Won: call the provider, renewing the lease every
   ``lease_s / 3`` while it runs; then write ``Finished`` with the reply (success), or delete the claim (failure)
   so the next request re-runs it. The call outlives a requester cancelled at its deadline: a try already sent is
   paid for, so its reply is recorded for the redelivery rather than bought again.
3. Lost: the key holds ``Finished`` -> return its reply with ``replayed=True``; it holds another owner's live
   ``Running`` -> watch the key until ``Finished`` (replay), deleted (try again) or the lease passes unrenewed
   (a crashed owner: take the claim over by compare-and-set, so exactly one waiter re-runs it).

4. Our own ``Running`` claim that this process is neither running nor settling is an orphan (its ``create`` landed
   but the acknowledgement was lost in a reconnect): taken over at once instead of after the lease.

``digest`` (cache.py's call digest) guards against a caller reusing (task, round, step) for a different call: a
mismatch is logged and called without the ledger. When the bucket does not answer (JetStream down or restarting),
the request fails fast with a retryable ``unavailable`` error and no provider call: calling anyway would pay twice
once the executor retries, and the reply could not travel back over a broken connection anyway. Replayed usage is
the original's: the executor never counted it (it crashed before checkpointing it), so counting it once is right.

Costs: one KV round trip (the ``create``) before the call; the final write goes behind the reply and is retried
through short outages for ``settle_s``. Limits: leases use wall clocks, so replicas' clocks must agree to well
within ``grace_s``; a replica that dies after replying but before its final write lands leaves a claim that a later
duplicate re-runs once its lease lapses; an outage longer than the lease can let a waiter take over a live call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable

import msgspec
import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from conductor.aio import stop_task
from schemas.errors import ErrorCode, ErrorInfo
from schemas.work import WorkReply, WorkRequest
from services.worker_adapter.stats import CallStats
from services.worker_adapter.store import kv_token
from services.worker_adapter.writebehind import WriteBehind

log = structlog.get_logger("conductor.worker_adapter")


class Running(msgspec.Struct, frozen=True, kw_only=True, tag="running", tag_field="state"):
    owner: str
    digest: str
    started_at: float
    lease_until: float


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="done", tag_field="state"):
    digest: str
    reply: WorkReply
    finished_at: float


CallRecord = Running | Finished
_decoder = msgspec.json.Decoder(CallRecord)

RENEWAL_STOP_S = 1.0
"""How long a finished call waits for its renewal loop to stop before settling anyway."""

WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's error codes for a failed compare-and-set; ``kv.delete(last=)`` surfaces them as a bare APIError."""


def _decode(key: str, value: bytes | None) -> CallRecord | None:
    """A record, or None for one written by an incompatible version (logged; the caller calls without the ledger)."""
    try:
        return _decoder.decode(value or b"")
    except msgspec.DecodeError as exc:
        log.warning("unreadable call record", key=key, error=str(exc))
        return None


class Owned(msgspec.Struct, frozen=True):
    revision: int


class Replay(msgspec.Struct, frozen=True):
    reply: WorkReply
    waited: bool


class Bypass(msgspec.Struct, frozen=True):
    """Call without the ledger (the key was used for a different call); ``reason`` is logged."""

    reason: str


Claim = Owned | Replay | Bypass
Compute = Callable[[], Awaitable[WorkReply]]


def call_key(req: WorkRequest) -> str:
    return f"{kv_token(req.task_id)}.{req.round}.{req.step}"


def unavailable(worker: str, exc: Exception) -> WorkReply:
    error = ErrorInfo(
        code=ErrorCode.UNAVAILABLE,
        message=f"the call ledger (NATS KV) did not answer, so the call was not made: {exc!r}",
        retryable=True,
    )
    return WorkReply(worker=worker, attempts=0, error=error)


class _Lease:
    """The claim's latest revision, advanced by the renewal loop; ``lost`` once another replica took it over."""

    def __init__(self, revision: int) -> None:
        self.revision = revision
        self.lost = False
        self.done = False  # the call finished: renewing stops


class CallLedger:
    def __init__(
        self,
        kv: KeyValue,
        *,
        owner: str,
        stats: CallStats,
        writes: WriteBehind,
        lease_s: float = 15.0,
        grace_s: float = 1.0,
        settle_s: float = 30.0,
    ) -> None:
        self._kv = kv
        self._owner = owner
        self._stats = stats
        self._writes = writes
        self.lease_s = lease_s
        self.grace_s = grace_s
        self.settle_s = settle_s
        self._inflight: dict[str, asyncio.Future[WorkReply | None]] = {}
        self._working: dict[str, asyncio.Task[WorkReply]] = {}  # owned calls running here, requested or not
        self._unsettled: set[str] = set()  # keys whose final write is still on its way

    async def aclose(self, timeout_s: float = 1.0) -> None:
        """Stopping: the calls still running for requesters who left are cancelled, which releases their claims
        (behind, like any failure) for another replica to run them at once rather than after their leases."""
        works = list(self._working.values())
        for work in works:
            work.cancel()
        if works:
            await asyncio.wait(works, timeout=timeout_s)

    async def run(self, req: WorkRequest, digest: str, compute: Compute) -> WorkReply:
        """The reply for this (task, round, step): a stored one, a running one's, or ``compute()``'s."""
        key = call_key(req)
        while (shared := self._inflight.get(key)) is not None:
            reply = await asyncio.shield(shared)
            if reply is not None and reply.error is None:
                self._stats.replays += 1
                self._stats.joined += 1
                return msgspec.structs.replace(reply, replayed=True, worker=req.worker)
            # the other request failed or was cancelled: this one is a retry, so it runs (below or after a wait)
        future: asyncio.Future[WorkReply | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        reply = None
        try:
            reply = await self._run(key, req.worker, digest, compute)
            return reply
        finally:
            del self._inflight[key]
            future.set_result(reply)

    async def _run(self, key: str, worker: str, digest: str, compute: Compute) -> WorkReply:
        try:
            claim = await self._claim(key, digest)
        except nats.errors.Error as exc:
            log.warning("call ledger unavailable; not calling", key=key, error=repr(exc))
            return unavailable(worker, exc)
        match claim:
            case Replay(reply=reply, waited=waited):
                self._stats.replays += 1
                self._stats.joined += int(waited)
                # The digest leaves the pool entry's name out (two entries with one provider, model and parameters
                # make the same call): the reply is this request's, in its worker's name, which the executor checks.
                return msgspec.structs.replace(reply, replayed=True, worker=worker)
            case Bypass(reason=reason):
                log.warning("calling without the ledger", key=key, reason=reason)
                return await compute()
            case Owned(revision=revision):
                return await self._run_owned(key, digest, _Lease(revision), compute)
        raise AssertionError("unreachable")  # pragma: no cover

    def _running(self, digest: str) -> bytes:
        now = time.time()
        record = Running(owner=self._owner, digest=digest, started_at=now, lease_until=now + self.lease_s)
        return msgspec.json.encode(record)

    async def _claim(self, key: str, digest: str) -> Claim:
        """Win the claim, or learn the finished reply, waiting out a live claim of another replica."""
        waited = False
        while True:
            try:
                return Owned(await self._kv.create(key, self._running(digest)))
            except js_errors.KeyWrongLastSequenceError:
                pass
            try:
                entry = await self._kv.get(key)
            except js_errors.KeyNotFoundError:
                continue  # released between our create and get
            record = _decode(key, entry.value)
            if record is None or record.digest != digest:
                return Bypass("this (task, round, step) was used for a different call")
            if isinstance(record, Finished):
                return Replay(record.reply, waited)
            if record.owner == self._owner and (work := self._working.get(key)) is not None:
                # Our call, still running for a requester who left: wait for it here, not for its lease, which a
                # starved loop may renew late. Then its record (or its release) is read again.
                waited = True
                await asyncio.wait({work})
                continue
            if record.owner == self._owner and key not in self._unsettled:
                if (taken := await self._take_over(key, digest, entry.revision, "orphan")) is not None:
                    return taken  # our orphan: run() holds this key's future, so nobody here runs it
                continue
            waited = True
            outcome = await self._wait(key, entry.revision, record)
            if isinstance(outcome, Finished):
                return Replay(outcome.reply, waited)
            if (
                outcome is not None
                and (taken := await self._take_over(key, digest, outcome, "lapsed")) is not None
            ):
                return taken

    async def _wait(self, key: str, revision: int, record: Running) -> Finished | int | None:
        """Watch a live claim: its ``Finished`` record, None when released, or the revision of a lapsed lease."""
        watcher = await self._kv.watch(key)
        try:
            while (remaining := record.lease_until + self.grace_s - time.time()) > 0:
                try:
                    entry = await watcher.updates(timeout=remaining)
                except nats.errors.TimeoutError:
                    continue
                if entry is None or entry.revision < revision:
                    continue  # the initial "caught up" marker, or an update we already know
                if entry.operation in (KV_DEL, KV_PURGE):
                    return None
                revision = entry.revision
                update = _decode(key, entry.value)
                if update is None:
                    return None  # overwritten by something unreadable: start over (and bypass)
                if isinstance(update, Finished):
                    return update
                record = update  # renewed, or taken over by another waiter
            return revision
        finally:
            # a closed connection has ended the subscription already
            with contextlib.suppress(nats.errors.ConnectionClosedError):
                await watcher.stop()

    async def _take_over(self, key: str, digest: str, revision: int, why: str) -> Owned | None:
        try:
            owned = Owned(await self._kv.update(key, self._running(digest), last=revision))
        except js_errors.KeyWrongLastSequenceError:
            return None  # another waiter won, or the owner woke up: look again
        self._stats.takeovers += 1
        log.warning("took over a call claim", key=key, why=why)  # "lapsed": its lease; "orphan": our own
        return owned

    async def _run_owned(self, key: str, digest: str, lease: _Lease, compute: Compute) -> WorkReply:
        """The claimed call, in a task of its own that a requester cancelled at its deadline leaves running: a try
        already sent is paid for, so it finishes and its reply is recorded for the redelivery to replay instead of
        being bought again (found by the chaos suite beside a CPU hog, where answers waited in a starved loop
        past the deadline). No new try starts after the deadline (core.py), so it ends within a try of it."""
        work = asyncio.create_task(self._call_owned(key, digest, lease, compute))
        self._working[key] = work
        work.add_done_callback(lambda _: self._working.pop(key) if self._working.get(key) is work else None)
        return await asyncio.shield(work)

    async def _call_owned(self, key: str, digest: str, lease: _Lease, compute: Compute) -> WorkReply:
        renewal = asyncio.create_task(self._renew(key, digest, lease))
        reply = None
        try:
            reply = await compute()
            return reply
        finally:
            # Stop renewing. Not by cancellation alone: a cancel that lands inside a nats-py request can be
            # swallowed (asyncio.wait_for in Python 3.11 and nats-py's flush both can), which once left this
            # reply waiting forever on a renewal loop that never ended (found by the chaos suite). ``done`` ends
            # the loop at its next step whatever happened to the cancel, and the wait here is bounded.
            lease.done = True
            try:
                await stop_task(renewal, timeout=RENEWAL_STOP_S, what="ledger lease renewal")
            finally:
                self._settle(key, digest, lease, reply)

    def _settle(self, key: str, digest: str, lease: _Lease, reply: WorkReply | None) -> None:
        """Record a success for replays; release a failure (or a cancelled call) so the next request re-runs it.

        Behind the reply (see writebehind.py): a duplicate arriving first sees our live claim and waits for this.
        """
        if reply is not None and reply.error is None:
            done = msgspec.json.encode(Finished(digest=digest, reply=reply, finished_at=time.time()))
            write: Callable[[], Awaitable[object]] = functools.partial(self._kv.put, key, done)
        elif not lease.lost:
            write = functools.partial(self._release, key, lease.revision)
        else:
            return
        self._unsettled.add(key)
        self._writes.spawn(self._persist(key, write), what="ledger settle")

    async def _persist(self, key: str, write: Callable[[], Awaitable[object]]) -> None:
        """Retry the final write through a short outage (a nats-server restart): a lost ``Finished`` would make a
        duplicate re-run the call once the lease lapses. Both writes are idempotent, so a retry after a lost
        acknowledgement is harmless."""
        delay, deadline = 0.2, time.monotonic() + self.settle_s
        try:
            while True:
                try:
                    await write()
                    return
                except nats.errors.Error as exc:
                    if time.monotonic() + delay > deadline:
                        raise
                    log.info("retrying a call-record write", key=key, error=repr(exc))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
        finally:
            self._unsettled.discard(key)

    async def _release(self, key: str, revision: int) -> None:
        try:
            await self._kv.delete(key, last=revision)
        except js_errors.APIError as exc:
            if exc.err_code not in WRONG_LAST_SEQUENCE:
                raise
            log.info("claim already taken over; not releasing", key=key)

    async def _renew(self, key: str, digest: str, lease: _Lease) -> None:
        """Keep the claim alive while the call runs (retries and backoff can take minutes); ends once
        ``lease.done`` is set, even if its cancellation was lost."""
        while not lease.done:
            await asyncio.sleep(self.lease_s / 3)
            if lease.done:
                return
            try:
                revision = await self._kv.update(key, self._running(digest), last=lease.revision)
                if lease.done:
                    return  # settled meanwhile: the settle's write uses the revision it saw
                lease.revision = revision
            except js_errors.KeyWrongLastSequenceError:
                lease.lost = True
                log.warning("lost the claim to another replica while calling", key=key)
                return
            except nats.errors.Error as exc:  # transient: try again next period
                log.warning("could not renew the claim", key=key, error=repr(exc))
