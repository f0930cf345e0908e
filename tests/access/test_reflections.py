"""Issue 34, item 3: nats-server as a confused deputy. A user makes a request it may make — a durable submit, a
direct get of its own result, the intake's consumer info, a training job — naming a subject it may not publish to
as the reply. nats-server checks the publish subject only, and JetStream answers (a PubAck, the direct get's
message, an API response) onto that reply subject, where a stream stores it. With every tenant (and the trainer)
in its own account (conductor/access.py), the answer lands in the requester's own account, where no store of the
services lives: every store keeps exactly what it had, one test per store, each failing on the layout of one
account with subject permissions. The family is scripts/probe_reflection.py's."""

from __future__ import annotations

import uuid

import pytest

from scripts.probe_reflection import ensure_stores, reflect, stores

pytestmark = pytest.mark.nats


@pytest.mark.parametrize("store_name", list(stores("x")))
async def test_no_answer_of_nats_server_lands_in_a_services_store(secured, services, store_name):
    await ensure_stores(secured.connect)
    store = stores(uuid.uuid4().hex[:12])[store_name]
    written, tried = await reflect(secured.connect, store)
    assert tried >= 7  # client, beta, gateway: submit, direct get (and consumer info); the trainer's job
    assert written == [], f"{store_name} written by reflection: {written}"
