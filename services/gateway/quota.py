"""Per-key rate and spend limits, deployment-wide: one record per key in a JetStream KV bucket, changed only by
compare-and-set, as the worker-adapter keeps its per-worker limits (services/worker_adapter/limits.py).

Windows are fixed: requests per UTC minute, dollars per UTC day. A request is admitted (and counted) before its
solve starts; its cost is added when it finishes, so the spend limit can be overshot by the requests already
running when it is reached (at most one request's cost per concurrent request of that key), stated here and in the
README. A key with no limits costs no KV round trip at all.
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

from services.gateway.keys import ApiKey
from services.gateway.openai_api import GatewayError

CAS_TRIES = 50


class KeyLoad(msgspec.Struct, frozen=True, kw_only=True):
    minute: int = 0
    requests: int = 0
    day: int = 0
    spend_usd: float = 0.0


_dec = msgspec.json.Decoder(KeyLoad)
_enc = msgspec.json.Encoder()


def rate_limited(message: str, code: str, retry_after: float) -> GatewayError:
    return GatewayError(
        429, message, kind="rate_limit_error", code=code, retry_after=max(1, math.ceil(retry_after))
    )


def admit_load(load: KeyLoad, key: ApiKey, now: float) -> KeyLoad:
    """The record after admitting one request now, or a 429 naming the limit and when it resets. Pure."""
    minute, day = int(now // 60), int(now // 86400)
    if load.minute != minute:
        load = msgspec.structs.replace(load, minute=minute, requests=0)
    if load.day != day:
        load = msgspec.structs.replace(load, day=day, spend_usd=0.0)
    if key.spend_usd_per_day is not None and load.spend_usd >= key.spend_usd_per_day:
        raise rate_limited(
            f"key {key.name!r} reached its spend limit of ${key.spend_usd_per_day:g} for today (UTC)",
            "spend_limit_exceeded",
            (day + 1) * 86400 - now,
        )
    if key.rpm is not None and load.requests >= key.rpm:
        raise rate_limited(
            f"key {key.name!r} reached its limit of {key.rpm} requests per minute", "rate_limit_exceeded", (minute + 1) * 60 - now
        )
    return msgspec.structs.replace(load, requests=load.requests + 1)


def charge_load(load: KeyLoad, cost_usd: float, now: float) -> KeyLoad:
    day = int(now // 86400)
    if load.day != day:
        load = msgspec.structs.replace(load, day=day, spend_usd=0.0)
    return msgspec.structs.replace(load, spend_usd=load.spend_usd + cost_usd)


class Quotas:
    def __init__(self, kv: KeyValue, clock: Callable[[], float] = time.time) -> None:
        self._kv = kv
        self._clock = clock

    async def admit(self, key: ApiKey) -> None:
        if key.rpm is None and key.spend_usd_per_day is None:
            return
        await self._update(key.name, lambda load: admit_load(load, key, self._clock()))

    async def charge(self, key: ApiKey, cost_usd: float) -> None:
        if key.spend_usd_per_day is None or cost_usd <= 0:
            return
        await self._update(key.name, lambda load: charge_load(load, cost_usd, self._clock()))

    async def _update(self, name: str, change: Callable[[KeyLoad], KeyLoad]) -> None:
        for _ in range(CAS_TRIES):
            try:
                entry = await self._kv.get(name)
                load, revision = _dec.decode(entry.value) if entry.value else KeyLoad(), entry.revision
            except js_errors.KeyNotFoundError:
                load, revision = KeyLoad(), None
            new = change(load)  # raises the 429
            try:
                if revision is None:
                    await self._kv.create(name, _enc.encode(new))
                else:
                    await self._kv.update(name, _enc.encode(new), last=revision)
                return
            except (js_errors.KeyWrongLastSequenceError, js_errors.KeyDeletedError, js_errors.APIError):
                await asyncio.sleep(random.uniform(0, 0.005))  # another replica wrote first: read again
        raise GatewayError(
            503, f"quota record for key {name!r} is too contended", kind="service_unavailable", code="quota_contended", retry_after=1
        )
