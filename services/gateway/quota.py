"""Per-key rate and spend limits, deployment-wide: one record per key in a JetStream KV bucket, changed only by
compare-and-set, as the worker-adapter keeps its per-worker limits (services/worker_adapter/limits.py).

Windows are fixed: requests per UTC minute, dollars per UTC day. Spend is *reserved* at admission (issue 19,
item 3): a request holds its estimate (the key's ``reserve_usd``, else the gateway's) until it finishes, the hold
counts against the day's limit, and the task is sent with that estimate as its budget — the executor stops paying
for it beyond the hold — so whatever the concurrency, a key's spend stays under its limit plus at most one call in
flight per request. The hold is settled with what the task really cost, also when the client hung up
(services/gateway/calls.py). Holds expire after the longest a request may run, so a gateway that died holding one
frees it. The number of holds is the key's requests in flight, bounded by ``max_in_flight``. A key with no limits
costs no KV round trip at all.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable

import msgspec
import nats.js.errors as js_errors
from nats.js.kv import KeyValue

from conductor import stored
from services.gateway.bus import store_refused
from services.gateway.errors import GatewayError
from services.gateway.keys import ApiKey

CAS_TRIES = 50
QUOTA_STORE = "gateway_quota"  # ``conductor_store_entries_refused`` label
WRONG_LAST_SEQUENCE = (10071, 10164)
"""JetStream's codes for a lost compare-and-set (another replica wrote first): the only failure retried here."""


class Hold(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Dollars reserved by one running request, until it settles or ``expires`` (unix seconds)."""

    id: str
    usd: float
    expires: float


class KeyLoad(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A key's record. Unknown fields are refused: every field has a default, so any JSON object stored here (a
    PubAck aimed at the key as a reply, issue 34) would otherwise read as a fresh record with nothing spent."""

    minute: int = 0
    requests: int = 0
    day: int = 0
    spend_usd: float = 0.0
    holds: list[Hold] = []

    def live(self, now: float) -> list[Hold]:
        return [h for h in self.holds if h.expires > now]


_dec = msgspec.json.Decoder(KeyLoad)
_enc = msgspec.json.Encoder()


def rate_limited(message: str, code: str, retry_after: float) -> GatewayError:
    return GatewayError(
        429, message, kind="rate_limit_error", code=code, retry_after=max(1, math.ceil(retry_after))
    )


def admit_load(load: KeyLoad, key: ApiKey, now: float, hold: Hold | None = None) -> KeyLoad:
    """The record after admitting one request now (holding ``hold``), or a 429 naming the limit and when it
    resets. Pure."""
    minute, day = int(now // 60), int(now // 86400)
    if load.minute != minute:
        load = msgspec.structs.replace(load, minute=minute, requests=0)
    if load.day != day:
        load = msgspec.structs.replace(load, day=day, spend_usd=0.0)
    holds = load.live(now)
    if key.spend_usd_per_day is not None:
        held = sum(h.usd for h in holds) + (hold.usd if hold is not None else 0.0)
        if load.spend_usd >= key.spend_usd_per_day or (
            hold is not None and load.spend_usd + held > key.spend_usd_per_day
        ):
            spent = f"${load.spend_usd:.6f} spent and ${held:.6f} held by requests running now"
            raise rate_limited(
                f"key {key.name!r} reached its spend limit of ${key.spend_usd_per_day:g} for today (UTC): {spent}",
                "spend_limit_exceeded",
                (day + 1) * 86400 - now
                if not holds
                else 1,  # a running request may settle for less than it held
            )
    if key.max_in_flight is not None and len(holds) >= key.max_in_flight:
        raise rate_limited(
            f"key {key.name!r} has {len(holds)} requests running, its limit", "in_flight_limit_exceeded", 1
        )
    if key.rpm is not None and load.requests >= key.rpm:
        raise rate_limited(
            f"key {key.name!r} reached its limit of {key.rpm} requests per minute",
            "rate_limit_exceeded",
            (minute + 1) * 60 - now,
        )
    return msgspec.structs.replace(
        load, requests=load.requests + 1, holds=[*holds, *([hold] if hold else [])]
    )


def charge_load(load: KeyLoad, cost_usd: float, now: float, hold_id: str | None = None) -> KeyLoad:
    """The record after a request settles: its hold released, what it cost added to the day's spend. Pure."""
    day = int(now // 86400)
    if load.day != day:
        load = msgspec.structs.replace(load, day=day, spend_usd=0.0)
    holds = [h for h in load.live(now) if h.id != hold_id]
    return msgspec.structs.replace(load, spend_usd=load.spend_usd + cost_usd, holds=holds)


class Quotas:
    def __init__(self, kv: KeyValue, clock: Callable[[], float] = time.time) -> None:
        self._kv = kv
        self._clock = clock

    def limited(self, key: ApiKey) -> bool:
        return key.rpm is not None or key.spend_usd_per_day is not None or key.max_in_flight is not None

    async def admit(self, key: ApiKey, hold: Hold | None = None) -> None:
        """Count the request and take its ``hold`` (None: nothing to reserve), or raise the 429."""
        if not self.limited(key):
            return
        await self._update(key.name, lambda load: admit_load(load, key, self._clock(), hold))

    async def charge(self, key: ApiKey, cost_usd: float, hold: Hold | None = None) -> None:
        """Settle a request: release its hold and add what it cost."""
        if not self.limited(key) or (hold is None and (key.spend_usd_per_day is None or cost_usd <= 0)):
            return
        await self._update(
            key.name, lambda load: charge_load(load, cost_usd, self._clock(), hold and hold.id)
        )

    async def _update(self, name: str, change: Callable[[KeyLoad], KeyLoad]) -> None:
        for _ in range(CAS_TRIES):
            try:
                entry = await self._kv.get(name)
                revision = entry.revision
                # not a record (conductor/stored.py): logged, counted, and overwritten by this compare-and-set
                load = (
                    stored.record(entry.value, _dec, QUOTA_STORE, name) if entry.value else None
                ) or KeyLoad()
            except js_errors.KeyNotFoundError:
                load, revision = KeyLoad(), None
            new = change(load)  # raises the 429
            try:
                if revision is None:
                    await self._kv.create(name, _enc.encode(new))
                else:
                    await self._kv.update(name, _enc.encode(new), last=revision)
                return
            except (js_errors.KeyWrongLastSequenceError, js_errors.KeyDeletedError):
                pass  # another replica wrote first: read again
            except js_errors.APIError as exc:
                # anything but a lost compare-and-set (a full store, say) is named as what it is
                if exc.err_code not in WRONG_LAST_SEQUENCE:
                    raise store_refused(exc, f"the quota record of key {name!r} was not written") from exc
            await asyncio.sleep(random.uniform(0, 0.005))
        raise GatewayError(
            503,
            f"quota record for key {name!r} is too contended",
            kind="service_unavailable",
            code="quota_contended",
            retry_after=1,
        )
