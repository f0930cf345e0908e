"""The pure parts of the shared features: reservation arithmetic, KV key spelling, call digests, bucket names."""

from __future__ import annotations

import msgspec
import pytest

from conductor.pool import PoolError, WorkerSpec, parse_pool
from schemas.tasks import Names
from schemas.work import ChatMessage, WorkRequest
from services.worker_adapter.cache import call_digest
from services.worker_adapter.config import WorkerAdapterSettings
from services.worker_adapter.core import call_params
from services.worker_adapter.ledger import call_key
from services.worker_adapter.limits import Holding, Need, WorkerLoad, cool, hold, reserve
from services.worker_adapter.store import Buckets, kv_token

SPEC = WorkerSpec(name="w", provider="openai", model="m", concurrency=4, rpm=100, tpm=10_000)
NOW = 1_000_000.0
WINDOW = int(NOW // 60)
NO_BLOCK = Need()


def _reserve(load: WorkerLoad, me: str, need: Need, block: Need = NO_BLOCK, now: float = NOW):
    return reserve(load, me, SPEC, need, block, now, lease_s=15.0, window=int(now // 60))


def test_slots_are_granted_up_to_the_limit_and_then_wished_for():
    load, grant = _reserve(WorkerLoad(), "a", Need(slots=3))
    assert grant.slots == 3 and load.holders["a"].slots == 3 and not load.wanted
    load, grant = _reserve(load, "b", Need(slots=3))
    assert grant.slots == 1 and load.holders["b"].slots == 1 and "b" in load.wanted
    same, grant = _reserve(load, "b", Need(slots=1))  # nothing free, wish still fresh: nothing to write
    assert same is load and grant.slots == 0


def test_expired_holdings_and_wishes_are_dropped():
    stale = WorkerLoad(holders={"dead": Holding(slots=4, expires_at=NOW - 1)}, wanted={"gone": NOW - 1})
    load, grant = _reserve(stale, "a", Need(slots=2))
    assert grant.slots == 2 and set(load.holders) == {"a"} and not load.wanted


def test_nobody_at_their_fair_share_grows_while_another_waits():
    load = WorkerLoad(holders={"a": Holding(slots=2, expires_at=NOW + 9)}, wanted={"b": NOW + 9})
    _, grant = _reserve(load, "a", Need(slots=1))  # 2 free, but a already has ceil(4 / 2) = 2
    assert grant.slots == 0
    _, grant = _reserve(load, "b", Need(slots=2))
    assert grant.slots == 2


def test_rates_reserve_blocks_and_reset_with_the_window():
    load, grant = _reserve(WorkerLoad(), "a", Need(requests=1, tokens=500), Need(requests=5, tokens=2_000))
    assert (grant.requests, grant.tokens, load.requests, load.tokens) == (5, 2_000, 5, 2_000)
    full = msgspec.structs.replace(load, requests=100, tokens=9_900)
    same, grant = _reserve(full, "b", Need(requests=1))
    assert same is full and grant.requests == 0  # the minute's requests are gone
    _, grant = _reserve(full, "b", Need(tokens=200))
    assert grant.tokens == 0  # 100 left < 200 needed: all or nothing
    later, grant = _reserve(full, "b", Need(requests=1), Need(requests=5), now=NOW + 60)
    assert grant.requests == 5 and later.requests == 5 and later.window == WINDOW + 1


def test_holding_is_renewed_or_returned_and_cooldowns_only_extend():
    load = WorkerLoad(holders={"a": Holding(slots=3, expires_at=NOW + 1)}, wanted={"a": NOW + 5})
    kept = hold(load, "a", 1, False, NOW, lease_s=15.0)
    assert kept.holders["a"] == Holding(slots=1, expires_at=NOW + 15) and not kept.wanted
    assert "a" not in hold(kept, "a", 0, False, NOW, lease_s=15.0).holders
    assert hold(WorkerLoad(), "a", 0, False, NOW, lease_s=15.0) == WorkerLoad()
    assert cool(load, NOW + 5).cooldown_until == NOW + 5
    assert cool(cool(load, NOW + 5), NOW + 1).cooldown_until == NOW + 5


def test_kv_tokens_are_valid_and_injective():
    samples = ["task-1", "a.b", "a=2Eb", "task/1 é", "", "x" * 500, "==", "A_b-9"]
    tokens = [kv_token(s) for s in samples]
    assert len(set(tokens)) == len(samples)
    assert tokens[0] == "task-1" and tokens[1] == "a=2Eb" and tokens[2] == "a=3D2Eb"
    assert all(
        set(t) <= set("-_=ABCDEFabcdef0123456789" + "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ")
        for t in tokens
    )
    assert call_key(WorkRequest(worker="w", messages=[], task_id="t.1", round=2, step=3)) == "t=2E1.2.3"


def test_call_digest_covers_what_decides_the_completion():
    msgs = [ChatMessage(role="user", content="hi")]
    req = WorkRequest(worker="w", messages=msgs)
    base = call_digest(SPEC, call_params(SPEC, req), msgs)
    assert base == call_digest(SPEC, call_params(SPEC, req), [ChatMessage(role="user", content="hi")])
    renamed = msgspec.structs.replace(SPEC, name="w2", concurrency=1, price_in_per_mtok=9.0)
    assert (
        call_digest(renamed, call_params(renamed, req), msgs) == base
    )  # pool name, limits, prices: not in it
    changed = [
        call_digest(SPEC, call_params(SPEC, WorkRequest(worker="w", messages=msgs, temperature=0.7)), msgs),
        call_digest(SPEC, call_params(SPEC, WorkRequest(worker="w", messages=msgs, max_tokens=5)), msgs),
        call_digest(msgspec.structs.replace(SPEC, reasoning_effort="high"), call_params(SPEC, req), msgs),
        call_digest(msgspec.structs.replace(SPEC, model="m2"), call_params(SPEC, req), msgs),
        call_digest(SPEC, call_params(SPEC, req), [ChatMessage(role="system", content="hi")]),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_bucket_names_follow_the_executor_suffix():
    prefix = "t1234."
    suffix = Names.for_prefix(prefix).checkpoints_bucket.removeprefix("CONDUCTOR_CHECKPOINTS")
    assert Buckets.for_prefix(prefix).calls == "CONDUCTOR_CALLS" + suffix == "CONDUCTOR_CALLS_T1234"
    assert Buckets.for_prefix("").limits == "CONDUCTOR_LIMITS"


def test_shared_settings_from_env_and_pool_rates():
    settings = WorkerAdapterSettings.from_env({"CONDUCTOR_WORKER_SHARED": "0", "CONDUCTOR_CALL_LEASE_S": "5"})
    assert not settings.shared.enabled and settings.shared.lease_s == 5.0
    assert WorkerAdapterSettings.from_env({}).shared.enabled
    base = '[[workers]]\nname = "w"\nprovider = "openai"\nmodel = "m"\n'
    assert parse_pool(base + "rpm = 60\ntpm = 1000\n").workers[0].rpm == 60
    with pytest.raises(PoolError, match=r"workers\[0\]\.tpm: Expected `int` >= 1"):
        parse_pool(base + "tpm = 0\n")


def test_a_foreign_object_stored_as_a_limits_record_is_refused_and_counted():
    """A PubAck aimed at the record as a reply (issue 34) must not read silently as an empty record."""
    from conductor import metrics
    from services.worker_adapter.limits import _decode

    labels = {"store": "worker_limits", "reason": "undecodable"}
    before = metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) or 0.0
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"stream":"KV_CONDUCTOR_LIMITS","seq":3}', type=WorkerLoad)
    assert _decode("w", b'{"stream":"KV_CONDUCTOR_LIMITS","seq":3}') == WorkerLoad()
    assert metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) == before + 1
    held = WorkerLoad(holders={"a": Holding(slots=1, expires_at=NOW)}, requests=2)
    assert _decode("w", msgspec.json.encode(held)) == held
