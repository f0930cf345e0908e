"""Durable intake with unusable task ids (found by tests/chaos/test_fuzz.py): a typed result under a usable key,
never a KV error that redelivers the message until MaxDeliver."""

from __future__ import annotations

import asyncio

import nats
import pytest

from conductor.access import CLIENT
from conductor.client import ConductorClient
from schemas.errors import ErrorCode
from schemas.tasks import Names
from services.executor.validation import valid_task_id
from tests.executor.fakes import ScriptedTransport
from tests.executor.test_durable import _settings, _start

pytestmark = pytest.mark.nats


@pytest.mark.parametrize("task_id", ["a b", "t\u00e9", ".a", "a.", "a..b", "a*", "x" * 129, "\u0663"])
def test_unusable_task_ids(task_id):
    assert not valid_task_id(task_id)


async def test_bad_task_ids_and_msg_ids_get_typed_results_under_usable_keys(nats_url, subject_prefix):
    settings = _settings(nats_url, subject_prefix)
    _svc, broker = await _start(settings, ScriptedTransport([]))
    names = Names.for_prefix(subject_prefix)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    try:
        await js.publish(
            names.submit(CLIENT), b'{"question": "q", "task_id": "a b"}', headers={"Nats-Msg-Id": "m-1"}
        )
        ack = await js.publish(names.submit(CLIENT), b"{", headers={"Nats-Msg-Id": "no good"})
        async with ConductorClient(settings.common) as client:
            by_msg_id = await client.result("m-1", wait=10)
            by_seq = await client.result(f"seq-{ack.seq}", wait=10)
        assert by_msg_id.error.code == ErrorCode.BAD_REQUEST and by_msg_id.error.field == "task_id"
        assert by_seq.error.code == ErrorCode.BAD_REQUEST
        await asyncio.sleep(0.1)
        info = await js.consumer_info(names.tasks_stream, "executor")
        assert info.num_ack_pending == 0 and info.num_redelivered == 0
    finally:
        await nc.close()
        await broker.stop()
