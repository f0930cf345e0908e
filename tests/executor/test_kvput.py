"""The checkpoints' fast put (services/executor/store.py ``KvPut``) on a real nats-server: what it stores is what
nats-py's ``KeyValue.put`` stores (read back by nats-py's ``get``, the revision its sequence), and each way a put
fails is the error nats-py's put raises for it."""

from __future__ import annotations

import nats
import nats.js.api as js_api
import nats.js.errors as js_errors
import pytest

from conductor.endpoints import Requester
from services.executor.store import KvPut

pytestmark = pytest.mark.nats


async def test_a_put_is_nats_pys_put(nats_url, subject_prefix):
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        bucket = f"CP_{subject_prefix.rstrip('.')}"
        kv = await js.create_key_value(bucket=bucket, history=1)
        put = KvPut(Requester(nc), bucket)
        first = await put("client.t-1", b'{"step":1}')
        second = await put("client.t-1", b'{"step":2}')
        assert second == first + 1
        entry = await kv.get("client.t-1")
        assert (entry.value, entry.revision) == (b'{"step":2}', second)
        theirs = await kv.put("client.t-2", b"x")  # the two interleave in one stream
        assert theirs == second + 1
        await js.delete_key_value(bucket)
    finally:
        await nc.close()


async def test_each_failure_is_the_error_nats_py_raises(nats_url, subject_prefix):
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        missing = KvPut(Requester(nc), f"NONE_{subject_prefix.rstrip('.')}")
        with pytest.raises(js_errors.NoStreamResponseError):
            await missing("k", b"v")
        bucket = f"SMALL_{subject_prefix.rstrip('.')}"
        await js.create_key_value(js_api.KeyValueConfig(bucket=bucket, max_value_size=8))
        small = KvPut(Requester(nc), bucket)
        with pytest.raises(js_errors.BadRequestError) as caught:
            await small("k", b"more than eight bytes")
        kv = await js.key_value(bucket)
        with pytest.raises(js_errors.BadRequestError) as theirs:
            await kv.put("k", b"more than eight bytes")
        assert caught.value.err_code == theirs.value.err_code
        await js.delete_key_value(bucket)
    finally:
        await nc.close()
