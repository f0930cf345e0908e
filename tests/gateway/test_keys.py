"""API keys: hashed at rest, strict file format, and per-key limits decided by a pure function."""

from __future__ import annotations

import types

import msgspec
import pytest

from conductor import metrics
from services.gateway.errors import GatewayError
from services.gateway.keys import ApiKey, KeyRing, KeysFileError, entry_toml, new_key
from services.gateway.quota import KeyLoad, Quotas, admit_load, charge_load


def test_a_new_key_is_found_by_its_digest_and_the_file_never_holds_it(tmp_path):
    key, entry = new_key("team-a")
    path = tmp_path / "keys.toml"
    path.write_text(entry_toml(entry))
    assert key not in path.read_text()
    ring = KeyRing.load(path)
    assert ring.lookup(key).name == "team-a"
    assert ring.lookup(key + "x") is None


@pytest.mark.parametrize(
    "text",
    [
        "",  # no keys
        "[[keys]]\nname = 'a'\nsha256 = 'xyz'\n",  # not a digest
        "[[keys]]\nname = 'a b'\nsha256 = '" + "0" * 64 + "'\n",  # bad name
        "[[keys]]\nname = 'a'\nsha256 = '" + "0" * 64 + "'\nrpm = 0\n",
        "[[keys]]\nname = 'a'\nsha256 = '" + "0" * 64 + "'\nkey = 'plaintext'\n",  # unknown field
        "[[keys]]\nname = 'a'\nsha256 = '"
        + "0" * 64
        + "'\n[[keys]]\nname = 'a'\nsha256 = '"
        + "1" * 64
        + "'\n",
        "not toml [",
    ],
)
def test_malformed_keys_files_are_refused(tmp_path, text):
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(KeysFileError):
        KeyRing.load(path)


def test_missing_keys_file_is_refused(tmp_path):
    with pytest.raises(KeysFileError, match="cannot read"):
        KeyRing.load(tmp_path / "absent.toml")


def test_rate_window_admits_rpm_then_refuses_until_the_next_minute():
    _, key = new_key("k")
    key = type(key)(name="k", sha256=key.sha256, rpm=2)
    now = 600.0 + 10
    load = admit_load(admit_load(KeyLoad(), key, now), key, now)
    with pytest.raises(GatewayError) as err:
        admit_load(load, key, now)
    assert (err.value.status, err.value.code, err.value.retry_after) == (429, "rate_limit_exceeded", 50)
    assert admit_load(load, key, now + 60).requests == 1  # a new minute


def test_spend_limit_refuses_once_reached_and_resets_the_next_day():
    _, key = new_key("k")
    key = type(key)(name="k", sha256=key.sha256, spend_usd_per_day=1.0)
    now = 86400.0 * 3 + 100
    load = charge_load(admit_load(KeyLoad(), key, now), 1.5, now)
    with pytest.raises(GatewayError) as err:
        admit_load(load, key, now)
    assert err.value.code == "spend_limit_exceeded"
    assert admit_load(load, key, now + 86400).spend_usd == 0.0


def test_holds_reserve_spend_and_count_requests_in_flight():
    """Issue 19, item 3: a hold must fit under the limit with what is spent and held; settling releases it and adds
    the real cost; a hold past its expiry (a gateway that died) frees itself."""
    from services.gateway.keys import ApiKey
    from services.gateway.quota import Hold

    key = ApiKey(name="k", sha256="0" * 64, spend_usd_per_day=1.0, max_in_flight=3)
    now = 1_000_000.0
    hold = lambda i: Hold(id=str(i), usd=0.3, expires=now + 600)  # noqa: E731
    load = KeyLoad()
    for i in range(3):
        load = admit_load(load, key, now, hold(i))
    with pytest.raises(GatewayError) as err:  # 0.9 held + 0.3 > 1.0, and 3 in flight
        admit_load(load, key, now, hold(9))
    assert err.value.code == "spend_limit_exceeded" and err.value.retry_after == 1
    load = charge_load(load, 0.05, now, "0")  # settled for less than it held
    assert [h.id for h in load.holds] == ["1", "2"] and load.spend_usd == 0.05
    load = admit_load(load, key, now, hold(3))  # 0.05 + 0.6 + 0.3 <= 1.0
    with pytest.raises(GatewayError) as err:
        admit_load(load, key, now, Hold(id="x", usd=0.01, expires=now + 600))
    assert err.value.code == "in_flight_limit_exceeded"
    later = now + 601  # every hold expired: the gateway that took them is gone
    assert admit_load(load, key, later, Hold(id="y", usd=0.3, expires=later + 600)).holds[-1].id == "y"


class _KV:
    """A one-key KV with revisions and compare-and-set, as JetStream's."""

    def __init__(self, value: bytes) -> None:
        self.value, self.revision = value, 1

    async def get(self, name):
        return types.SimpleNamespace(value=self.value, revision=self.revision)

    async def update(self, name, value, last):
        assert last == self.revision
        self.value, self.revision = value, self.revision + 1

    async def create(self, name, value):
        raise AssertionError("the key exists")


async def test_a_foreign_object_stored_as_a_key_record_is_refused_counted_and_replaced():
    """A PubAck aimed at a key's record as a reply (issue 34) is not a record with nothing spent that reads as one
    silently: refused, counted, and overwritten by the next compare-and-set."""
    labels = {"store": "gateway_quota", "reason": "undecodable"}
    before = metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) or 0.0
    puback = b'{"stream":"KV_CONDUCTOR_GATEWAY_QUOTA","seq":9}'
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(puback, type=KeyLoad)
    kv = _KV(puback)
    key = ApiKey(name="k", sha256="0" * 64, rpm=10)
    await Quotas(kv, clock=lambda: 1_000_000.0).admit(key)  # type: ignore[arg-type]
    assert metrics.REGISTRY.get_sample_value("conductor_store_entries_refused_total", labels) == before + 1
    assert msgspec.json.decode(kv.value, type=KeyLoad).requests == 1 and kv.revision == 2


def test_a_key_whose_daily_limit_is_below_its_reserve_is_refused_at_start_up_with_the_reason(tmp_path):
    """Failed before (issue 34): loaded, then every request refused with "reached its spend limit ... $0 spent"."""
    path = tmp_path / "keys.toml"
    path.write_text(entry_toml(ApiKey(name="tight", sha256="1" * 64, spend_usd_per_day=0.01)))
    with pytest.raises(
        KeysFileError, match=r"keys\[0\]: spend_usd_per_day \$0.01 is below the \$0.05 held per "
    ):
        KeyRing.load(path, reserve_usd=0.05)  # the gateway's default reserve
    assert len(KeyRing.load(path, reserve_usd=0.01)) == 1  # a limit equal to the hold admits one request
    path.write_text(entry_toml(ApiKey(name="own", sha256="1" * 64, spend_usd_per_day=0.01, reserve_usd=0.02)))
    with pytest.raises(KeysFileError, match=r"\(its reserve_usd\): every request would be refused"):
        KeyRing.load(path, reserve_usd=0.001)
    path.write_text(
        entry_toml(ApiKey(name="fits", sha256="1" * 64, spend_usd_per_day=0.01, reserve_usd=0.002))
    )
    assert len(KeyRing.load(path, reserve_usd=0.05)) == 1
