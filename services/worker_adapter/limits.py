"""Back-pressure shared by every replica: per-worker concurrency, requests and tokens per minute, 429 cool-downs.

The pool's ``concurrency``, ``rpm`` and ``tpm`` hold for the whole deployment, however many worker-adapters run.
State: one record per worker (``WorkerLoad``) in the KV bucket ``CONDUCTOR_LIMITS``, changed only by
compare-and-set (``kv.update(.., last=revision)``) and mirrored into every replica by one KV watch.

- **Batch reservation, not a round trip per call.** A replica reserves capacity from the record in blocks and
  spends it locally: concurrency slots for as many calls as it has waiting, requests and tokens for the current
  minute in blocks of ``reserve_fraction`` of the limit. While its reservation lasts, a call costs no KV round
  trip at all; growing it costs one CAS (concurrent callers share it), a conflict one more ``get``. Measured on a
  local nats-server (tests/worker_adapter/test_shared.py::test_overhead_per_call): +3-9 µs per call, one KV write
  per ~600 calls; three replicas sharing concurrency 64 ran 3,000 10 ms calls at 70% of the ideal rate.
- **Leases, so a crashed replica leaks nothing for long.** Each replica's slot holding expires ``lease_s`` after
  its last write; a heartbeat every ``lease_s / 3`` renews it and returns slots that went unused for a whole period.
  Expired holdings are dropped by whoever writes next. Rate reservations die with their one-minute window.
- **Fair hand-back.** A replica that finds no free slot registers in ``wanted``; then every holder above its fair
  share (``ceil(concurrency / parties)``) gives slots back as its calls finish, and nobody at or above its share may
  grow. Waiters wake on each record change (the watch) or after ``poll_s``.
- **Shared cool-down.** A 429 with Retry-After sets ``cooldown_until`` in the record; every replica sees it through
  its mirror and holds new calls for that worker until then (no read per call). The mirror watches again after
  every reconnect (a KV watch does not survive a nats-server restart); meanwhile CAS conflicts still refresh it.
- Tokens per minute are charged before the call as input characters / 4 + the call's ``max_tokens`` (what hosted
  APIs count), and the unused part is refunded locally when the real usage is known.

Limits, stated: fixed one-minute windows (a burst of up to 2 × rpm can straddle a boundary, as with most providers'
own counters); capacity reserved by one replica and not used within the window is lost to the others (at most
``reserve_fraction`` of the limit per replica per window); a crashed replica's slots stay taken for up to
``lease_s``; windows and leases use wall clocks, so replicas' clocks must agree to well under a second; a replica
that loses NATS fails open to its local limits (logged) rather than stopping all calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import msgspec
import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from conductor import stored
from conductor.aio import stop_task
from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage
from services.worker_adapter.stats import CallStats
from services.worker_adapter.store import kv_token
from services.worker_adapter.writebehind import WriteBehind

log = structlog.get_logger("conductor.worker_adapter")

T = TypeVar("T")
KEY_PREFIX = "load"
CAS_TRIES = 50  # a record rewritten this often under us means something is badly wrong; fail open and log
TASK_STOP_S = 1.0  # how long to wait for a cancelled mirror or heartbeat to end (see conductor.aio.stop_task)
MIRROR_CHECK_S = 0.5  # how often the mirror looks for a reconnect (a local counter, no I/O)
LIMITS_STORE = "worker_limits"  # ``conductor_store_entries_refused`` label
CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with BPE tokenizers; only for charging tpm


class Holding(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    slots: int
    expires_at: float


class WorkerLoad(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One worker's deployment-wide state. ``window`` numbers the current minute; counts are reservations. Unknown
    fields are refused: every field has a default, so any JSON object stored here (a PubAck aimed at the key as a
    reply, issue 34) would otherwise read as a wiped record."""

    holders: dict[str, Holding] = {}  # replica -> concurrency slots it holds
    wanted: dict[str, float] = {}  # replica -> until when it asks for slots (it found none free)
    window: int = 0
    requests: int = 0
    tokens: int = 0
    cooldown_until: float = 0.0


class Need(msgspec.Struct, frozen=True):
    slots: int = 0
    requests: int = 0
    tokens: int = 0


class Grant(msgspec.Struct, frozen=True):
    slots: int
    requests: int
    tokens: int
    window: int


def token_estimate(messages: Sequence[ChatMessage], max_tokens: int) -> int:
    return sum(len(m.content) for m in messages) // CHARS_PER_TOKEN + max_tokens


def _rate(need: int, block: int, limit: int | None, used: int) -> int:
    """All of ``need`` plus up to ``block`` in total if it fits under ``limit``, else nothing."""
    if not need or limit is None:
        return 0
    left = limit - used
    return min(max(need, block), left) if left >= need else 0


def _live(load: WorkerLoad, now: float) -> tuple[dict[str, Holding], dict[str, float]]:
    holders = {r: h for r, h in load.holders.items() if h.expires_at > now}
    return holders, {r: t for r, t in load.wanted.items() if t > now}


def lapses_in(load: WorkerLoad, now: float) -> float:
    """Seconds until a holding or a wish in the record lapses by itself; no write announces that, so waiters time it."""
    times = [h.expires_at for h in load.holders.values()] + list(load.wanted.values())
    return min((t - now for t in times if t > now), default=math.inf)


def fair_share(concurrency: int, holders: Mapping[str, Holding], wanted: Mapping[str, float], me: str) -> int:
    return math.ceil(concurrency / len({*holders, *wanted, me}))


def reserve(
    load: WorkerLoad,
    me: str,
    spec: WorkerSpec,
    need: Need,
    block: Need,
    now: float,
    *,
    lease_s: float,
    window: int,
) -> tuple[WorkerLoad, Grant]:
    """Pure: the record after ``me`` reserves what fits of ``need`` (rates topped up towards ``block``).

    Returns the record itself (no write needed) when nothing can be granted and nothing needs saying.
    """
    window = max(window, load.window)
    used_r, used_t = (load.requests, load.tokens) if load.window == window else (0, 0)
    holders, wanted = _live(load, now)
    mine = holders[me].slots if me in holders else 0
    others_want = any(r != me for r in wanted)
    free = max(spec.concurrency - sum(h.slots for h in holders.values()), 0)
    if others_want and mine >= fair_share(spec.concurrency, holders, wanted, me):
        free = 0  # at or above our share while someone waits: let them have the next free slot
    slots = min(need.slots, free)
    grant = Grant(
        slots,
        _rate(need.requests, block.requests, spec.rpm, used_r),
        _rate(need.tokens, block.tokens, spec.tpm, used_t),
        window,
    )
    short = slots < need.slots
    if not (grant.slots or grant.requests or grant.tokens):
        fresh = load.wanted.get(me, 0.0) > now + lease_s / 2
        if (short and fresh) or (not short and me not in load.wanted):
            return load, grant
    if short:
        wanted[me] = now + lease_s
    else:
        wanted.pop(me, None)
    if mine + slots:
        holders[me] = Holding(slots=mine + slots, expires_at=now + lease_s)
    new = WorkerLoad(
        holders=holders,
        wanted=wanted,
        window=window,
        requests=used_r + grant.requests,
        tokens=used_t + grant.tokens,
        cooldown_until=load.cooldown_until,
    )
    return new, grant


def hold(load: WorkerLoad, me: str, slots: int, wanting: bool, now: float, *, lease_s: float) -> WorkerLoad:
    """Pure: the record with ``me`` holding exactly ``slots`` (renewed), expired entries dropped."""
    if not slots and me not in load.holders and (wanting or me not in load.wanted):
        return load
    holders, wanted = _live(load, now)
    holders.pop(me, None)
    if slots:
        holders[me] = Holding(slots=slots, expires_at=now + lease_s)
    if not wanting:
        wanted.pop(me, None)
    return msgspec.structs.replace(load, holders=holders, wanted=wanted)


def cool(load: WorkerLoad, until: float) -> WorkerLoad:
    return load if until <= load.cooldown_until else msgspec.structs.replace(load, cooldown_until=until)


class Permit:
    """One call's claim on capacity; ``spend`` reports the real token usage so the estimate's rest is refunded.
    Its own context (``async with gate.permit(...) as permit``): one object per call on the worker-adapter's path,
    no generator; this one claims nothing (``Unlimited``)."""

    __slots__ = ("spent",)

    def __init__(self) -> None:
        self.spent: int | None = None

    def spend(self, tokens: int) -> None:
        self.spent = tokens

    async def __aenter__(self) -> Permit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Claim(Permit):
    """``SharedLimits.permit``: capacity taken on entry (waiting for it if need be), given back on exit."""

    __slots__ = ("_limits", "_st", "_tokens", "_window")

    def __init__(self, limits: SharedLimits, st: _Worker, tokens: int) -> None:
        self.spent = None
        self._limits, self._st, self._tokens = limits, st, tokens
        self._window = 0

    async def __aenter__(self) -> Permit:
        self._window = await self._limits._acquire(self._st, self._tokens)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._limits._release(self._st, self._tokens, self.spent, self._window)


class Gate(Protocol):
    def permit(self, spec: WorkerSpec, tokens: int) -> Permit:
        """Wait for capacity for one call of about ``tokens`` tokens; hold it for the ``async with`` block."""
        ...

    async def cooldown(self, spec: WorkerSpec, seconds: float) -> None:
        """The provider asked us (everyone) to wait this long before calling this worker again."""
        ...

    async def aclose(self) -> None: ...


class Unlimited:
    """The gate when nothing is shared (no JetStream, or switched off): only the core's local semaphore applies."""

    def permit(self, spec: WorkerSpec, tokens: int) -> Permit:
        return Permit()

    async def cooldown(self, spec: WorkerSpec, seconds: float) -> None:
        return None

    async def aclose(self) -> None:
        return None


class _Worker:
    """This replica's side of one worker: the mirrored record and the capacity reserved from it."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        self.key = f"{KEY_PREFIX}.{kv_token(spec.name)}"
        self.revision = 0
        self.load = WorkerLoad()
        self.slots = 0  # held in the record
        self.busy = 0  # in use by calls here
        self.peak = 0  # most slots in use since the last heartbeat; idle ones beyond it are returned
        self.demand = 0  # calls here waiting for capacity
        self.waiting = 0  # calls here inside ``changed``
        self.window = -1
        self.requests_left = 0
        self.tokens_left = 0
        self.lock = asyncio.Lock()  # one reservation write at a time; the others re-check after it
        self._changed = asyncio.Event()

    def observe(self, revision: int, load: WorkerLoad) -> None:
        if revision > self.revision:
            self.revision, self.load = revision, load
            self.notify()

    def notify(self) -> None:
        if self.waiting:  # nobody waits (the usual case): no Event to set and replace per released call
            self._changed.set()
            self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Until the record or local capacity changes, or ``timeout`` passes (then the caller just looks again)."""
        self.waiting += 1
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(timeout, 0.0)):
                    await self._changed.wait()
        finally:
            self.waiting -= 1

    def shortfall(self, tokens: int, window: int) -> Need | None:
        if window > self.window:
            self.window, self.requests_left, self.tokens_left = window, 0, 0
        slots = int(self.busy >= self.slots)
        requests = int(self.spec.rpm is not None and self.requests_left < 1)
        toks = max(tokens - self.tokens_left, 0) if self.spec.tpm is not None else 0
        return Need(slots, requests, toks) if slots or requests or toks else None

    def take(self, tokens: int) -> None:
        self.busy += 1
        self.peak = max(self.peak, self.busy)
        self.requests_left -= 1
        self.tokens_left -= tokens

    def apply(self, grant: Grant) -> None:
        if grant.window > self.window:
            self.window, self.requests_left, self.tokens_left = grant.window, 0, 0
        if grant.window == self.window:
            self.requests_left += grant.requests
            self.tokens_left += grant.tokens
        self.slots += grant.slots


class SharedLimits:
    """The deployment-wide gate. Build with ``await SharedLimits.open(...)``; ``aclose`` returns held slots."""

    def __init__(
        self,
        kv: KeyValue,
        pool: Pool,
        *,
        owner: str,
        stats: CallStats,
        writes: WriteBehind,
        lease_s: float = 15.0,
        reserve_fraction: float = 0.05,
        window_s: float = 60.0,  # the rate window; 60 makes rpm/tpm per minute (tests shorten it)
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        reconnects: Callable[[], int] = lambda: 0,  # the connection's reconnect count (nats-py ``stats``)
    ) -> None:
        self._kv = kv
        self._owner = owner
        self._stats = stats
        self._writes = writes
        self.lease_s = lease_s
        self.reserve_fraction = reserve_fraction
        self.window_s = window_s
        self.poll_s = poll_s
        self._clock = clock
        self._reconnects = reconnects
        self._workers = {w.name: _Worker(w) for w in pool.workers}
        self._by_key = {w.key: w for w in self._workers.values()}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Start mirroring the records (the watch) and renewing our holdings (the heartbeat)."""
        watcher = await self._kv.watch(f"{KEY_PREFIX}.>")  # here, so a missing JetStream fails start-up
        self._tasks = [asyncio.create_task(self._mirror(watcher)), asyncio.create_task(self._heartbeat())]
        for task in self._tasks:
            task.add_done_callback(_report_end)

    async def _mirror(self, watcher: KeyValue.KeyWatcher) -> None:
        """Follow the records, and watch again after every reconnect: a KV watch is an ephemeral consumer that does
        not survive a nats-server restart (measured), and a dead mirror would hide cool-downs."""
        while True:
            seen = self._reconnects()
            follow = asyncio.create_task(self._follow(watcher))
            while (
                self._reconnects() == seen and not follow.done()
            ):  # nats-py counts reconnects, no callback here
                await asyncio.wait({follow}, timeout=MIRROR_CHECK_S)
            await stop_task(follow, timeout=TASK_STOP_S, what="limits mirror")
            watcher = await self._watch_again()

    async def _watch_again(self) -> KeyValue.KeyWatcher:
        while True:
            try:
                watcher = await self._kv.watch(f"{KEY_PREFIX}.>")
            except (
                nats.errors.Error
            ) as exc:  # still reconnecting: the CAS paths work without the mirror meanwhile
                log.info("limits mirror not back yet", error=repr(exc))
                await asyncio.sleep(MIRROR_CHECK_S)
                continue
            log.info("limits mirror re-created after a reconnect")
            return watcher

    async def aclose(self) -> None:
        """Stop, and hand our slots back now rather than when their lease runs out."""
        for task in self._tasks:
            await stop_task(task, timeout=TASK_STOP_S, what="shared limits task")
        for st in self._workers.values():
            if st.slots or self._owner in st.load.holders:
                st.slots = 0
                try:
                    await self._hold(st)
                except (nats.errors.Error, SharedLimitsError) as exc:
                    log.info(
                        "could not return slots; they lapse with their lease",
                        worker=st.spec.name,
                        error=repr(exc),
                    )

    def cooling(self, spec: WorkerSpec) -> float:
        """Seconds this worker is still cooling down after a 429, as this replica's mirror knows it."""
        return max(self._workers[spec.name].load.cooldown_until - self._clock(), 0.0)

    def window(self, now: float) -> int:
        return int(now // self.window_s)

    def permit(self, spec: WorkerSpec, tokens: int) -> Permit:
        if spec.tpm is not None:
            tokens = min(tokens, spec.tpm)  # a call bigger than the whole budget gets one full window
        return _Claim(self, self._workers[spec.name], tokens)

    async def cooldown(self, spec: WorkerSpec, seconds: float) -> None:
        st = self._workers[spec.name]
        until = self._clock() + seconds
        try:
            async with st.lock:
                await self._commit(st, lambda load, now: (cool(load, until), None))
        except (nats.errors.Error, SharedLimitsError) as exc:
            log.warning("could not share a cool-down", worker=spec.name, error=repr(exc))

    async def _acquire(self, st: _Worker, tokens: int) -> int:
        """Wait until this replica holds capacity for one more call, take it, and return the rate window."""
        st.demand += 1
        waited = cooled = False
        try:
            while True:
                now = self._clock()
                if st.load.cooldown_until > now:
                    cooled = True
                    await st.changed(st.load.cooldown_until - now)
                    continue
                window = self.window(now)
                if st.shortfall(tokens, window) is None:
                    st.take(tokens)
                    return window
                if await self._reserve(st, tokens):
                    continue
                waited = True
                next_window = (window + 1) * self.window_s - now
                await st.changed(min(self.poll_s, next_window, lapses_in(st.load, now) + 0.005))
        finally:
            st.demand -= 1
            self._stats.limit_waits += int(waited)
            self._stats.cooldown_waits += int(cooled)

    async def _reserve(self, st: _Worker, tokens: int) -> bool:
        """Grow this replica's reservation by one CAS (for every local waiter at once); True when it now suffices.

        KV trouble fails open: the call proceeds on local limits and the warning says so.
        """
        async with st.lock:
            now = self._clock()
            need = st.shortfall(tokens, self.window(now))
            if need is None:
                return True  # the previous holder of the lock reserved enough for us too
            spec = st.spec
            need = Need(
                slots=max(st.busy + st.demand - st.slots, need.slots),
                requests=need.requests,
                tokens=need.tokens,
            )
            block = Need(
                requests=max(math.ceil((spec.rpm or 0) * self.reserve_fraction), st.demand),
                tokens=max(math.ceil((spec.tpm or 0) * self.reserve_fraction), tokens * st.demand),
            )
            window = self.window(now)
            try:
                grant = await self._commit(
                    st,
                    lambda load, at: reserve(
                        load, self._owner, spec, need, block, at, lease_s=self.lease_s, window=window
                    ),
                )
            except (nats.errors.Error, SharedLimitsError) as exc:
                log.warning(
                    "shared limits unavailable; calling on local limits", worker=spec.name, error=repr(exc)
                )
                st.apply(Grant(need.slots, need.requests, need.tokens, window))
                return True
            st.apply(grant)
            return st.shortfall(tokens, self.window(self._clock())) is None

    def _release(self, st: _Worker, tokens: int, spent: int | None, window: int) -> None:
        st.busy -= 1
        if st.window == window:  # refund the estimate's unused part (all of it when the call failed)
            st.tokens_left += tokens - (spent or 0)
        st.notify()
        self._give_back(st)

    def _give_back(self, st: _Worker) -> None:
        """While another replica waits for a slot, return ours that are idle or above our fair share (never ones in
        use): we keep what our own calls need, up to the share."""
        asking = st.load.wanted
        if not asking or (len(asking) == 1 and self._owner in asking):
            return  # nobody else asks (the usual case): no live copies of the record's maps per released call
        holders, wanted = _live(st.load, self._clock())
        if not any(r != self._owner for r in wanted):
            return
        share = fair_share(st.spec.concurrency, holders, wanted, self._owner)
        keep = max(st.busy, min(share, st.busy + st.demand))
        if st.slots > keep:
            st.slots = keep
            self._writes.spawn(self._hold(st), what="limits give-back")

    async def _hold(self, st: _Worker) -> None:
        """Write our holding as it is now (renewed), also saying whether calls here still wait for slots."""
        async with st.lock:
            await self._commit(
                st,
                lambda load, now: (
                    hold(
                        load, self._owner, st.slots, st.demand > st.slots - st.busy, now, lease_s=self.lease_s
                    ),
                    None,
                ),
            )

    async def _commit(self, st: _Worker, change: Callable[[WorkerLoad, float], tuple[WorkerLoad, T]]) -> T:
        """Compare-and-set ``change(record)`` until it lands; an unchanged record is not written."""
        for _ in range(CAS_TRIES):
            new, result = change(st.load, self._clock())
            if new is st.load:
                return result
            try:
                revision = await self._kv.update(st.key, msgspec.json.encode(new), last=st.revision)
            except js_errors.KeyWrongLastSequenceError:
                await self._reload(st)
                continue
            self._stats.reserve_writes += 1
            st.observe(revision, new)
            return result
        raise SharedLimitsError(f"worker {st.spec.name!r}: the limits record kept changing under us")

    async def _reload(self, st: _Worker) -> None:
        try:
            entry = await self._kv.get(st.key)
        except js_errors.KeyNotFoundError as exc:  # never written (revision 0), or a tombstone (its revision)
            st.revision, st.load = (exc.entry.revision if exc.entry is not None else 0), WorkerLoad()
            st.notify()
            return
        st.observe(entry.revision, _decode(st.key, entry.value))

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        """Mirror every worker's record; wake local waiters and hand slots back when someone else waits."""
        try:
            async for entry in watcher:
                st = self._by_key.get(entry.key) if entry is not None else None
                if st is None:
                    continue
                deleted = entry.operation in (KV_DEL, KV_PURGE)
                st.observe(entry.revision, WorkerLoad() if deleted else _decode(entry.key, entry.value))
                if st.slots > st.busy + st.demand:
                    self._give_back(st)
        finally:
            # a closed connection has ended the subscription already
            with contextlib.suppress(nats.errors.ConnectionClosedError):
                await watcher.stop()

    async def _heartbeat(self) -> None:
        """Renew our holdings and return slots idle for a whole period (a burst's leftovers)."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            for st in self._workers.values():
                keep = max(st.peak, st.busy + st.demand)
                st.peak = st.busy
                if not st.slots and self._owner not in st.load.holders and self._owner not in st.load.wanted:
                    continue
                st.slots = min(st.slots, keep)
                try:
                    await self._hold(st)
                except (nats.errors.Error, SharedLimitsError) as exc:
                    log.warning("could not renew slot holding", worker=st.spec.name, error=repr(exc))


def _report_end(task: asyncio.Task[None]) -> None:
    """The mirror and the heartbeat run until ``aclose``; ending earlier leaves stale limits, so say so loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "shared limits task stopped", task=task.get_coro().__qualname__, error=repr(task.exception())
        )


class SharedLimitsError(RuntimeError):
    """The shared record could not be updated (endless CAS conflicts); callers fall back to local limits."""


_load_dec = msgspec.json.Decoder(WorkerLoad)


def _decode(key: str, value: bytes | None) -> WorkerLoad:
    """The stored record; one that is not a record (conductor/stored.py) reads as empty, logged and counted, and
    our next compare-and-set overwrites it."""
    return stored.record(value or b"{}", _load_dec, LIMITS_STORE, key) or WorkerLoad()
