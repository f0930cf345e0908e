"""Content-addressed worker-call cache in NATS KV: the same call (provider, model, parameters, messages) answered once.

Opt-in per request (``WorkRequest.cache``, which the executor copies from ``SolveRequest.cache``): eval and
training runs that want exact replays turn it on; production traffic that wants fresh samples leaves it off.

- Key: SHA-256 of a canonical msgpack encoding (``CallKey``: positional fields, deterministic map order) of what
  decides the completion — provider, model, base URL, every sampling/reasoning parameter after the request's
  overrides, and the messages. The pool name, prices, limits and timeouts are left out, so two pool entries for the
  same model share entries. Simulated workers are the exception: their answers depend on their name and sim table.
- Value: text, model and token counts of a successful reply; failures are never cached.
- A hit is a reply with ``cached=True``, the original token counts (so token budgets and reports still see the
  size of the context) and ``cost_usd=0``, ``calls=0`` (nothing was billed).
- Limits: concurrent identical misses on different replicas all call the provider (the first to finish is stored;
  the texts may differ); entries expire after the bucket's TTL; the round/step ``sample`` is not in the key.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence

import msgspec
import nats.errors
import nats.js.errors as js_errors
import structlog
from nats.js.kv import KeyValue

from conductor.pool import SimSpec, WorkerSpec
from schemas.usage import Usage
from schemas.work import ChatMessage, WorkReply
from services.worker_adapter.provider import CallParams
from services.worker_adapter.stats import CallStats
from services.worker_adapter.writebehind import WriteBehind

log = structlog.get_logger("conductor.worker_adapter")

KEY_VERSION = 1  # bump when CallKey changes, so old entries are never misread as new ones


class CallKey(msgspec.Struct, frozen=True, array_like=True):
    """What decides a completion, positionally (field names are not encoded, order is the contract)."""

    version: int
    provider: str
    model: str
    base_url: str | None
    max_tokens: int
    temperature: float
    top_p: float | None
    top_k: int | None
    presence_penalty: float | None
    reasoning_effort: str | None
    thinking_budget: int | None
    enable_thinking: bool | None
    sim_worker: str | None  # only for simulated workers
    sim: SimSpec | None
    messages: Sequence[ChatMessage]


class CachedCall(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    model: str
    input_tokens: int
    output_tokens: int
    stored_at: float


_encoder = msgspec.msgpack.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder(CachedCall)


def call_digest(spec: WorkerSpec, params: CallParams, messages: Sequence[ChatMessage]) -> str:
    """Hex SHA-256 of the call's canonical encoding; also the ledger's check that a duplicate is the same call."""
    sim = spec.provider == "sim"
    # A replay worker's reply is decided by the recorded model and the behaviour model (and the messages).
    model = f"{spec.replay.model}:{spec.replay.behaviour}" if spec.replay else spec.model
    key = CallKey(
        KEY_VERSION,
        spec.provider,
        model,
        spec.base_url,
        params.max_tokens,
        params.temperature,
        spec.top_p,
        spec.top_k,
        spec.presence_penalty,
        spec.reasoning_effort,
        spec.thinking_budget,
        spec.enable_thinking,
        spec.name if sim else None,
        spec.sim if sim else None,
        messages,
    )
    return hashlib.sha256(_encoder.encode(key)).hexdigest()


def hit_reply(spec: WorkerSpec, hit: CachedCall) -> WorkReply:
    usage = Usage(input_tokens=hit.input_tokens, output_tokens=hit.output_tokens, cost_usd=0.0, calls=0)
    return WorkReply(worker=spec.name, text=hit.text, model=hit.model, usage=usage, attempts=0, cached=True)


class CallCache:
    def __init__(self, kv: KeyValue, stats: CallStats, writes: WriteBehind) -> None:
        self._kv = kv
        self._stats = stats
        self._writes = writes

    async def get(self, digest: str) -> CachedCall | None:
        try:
            entry = await self._kv.get(digest)
        except js_errors.KeyNotFoundError:
            self._stats.cache_misses += 1
            return None
        except nats.errors.Error as exc:  # the cache is an optimisation: an outage is a logged miss
            log.warning("worker-call cache unavailable", error=repr(exc))
            self._stats.cache_misses += 1
            return None
        try:
            hit = _decoder.decode(entry.value or b"")
        except msgspec.DecodeError as exc:  # an incompatible writer: a miss, overwritten after the call
            log.warning("unreadable cache entry", key=digest, error=str(exc))
            self._stats.cache_misses += 1
            return None
        self._stats.cache_hits += 1
        return hit

    def store(self, digest: str, reply: WorkReply) -> None:
        """Write behind the reply: a lost write costs one future miss, never a wrong answer."""
        value = CachedCall(
            text=reply.text,
            model=reply.model,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            stored_at=time.time(),
        )
        self._writes.spawn(self._kv.put(digest, msgspec.json.encode(value)), what="cache write")
