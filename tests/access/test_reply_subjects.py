"""Issue 19, item 1: the executor as a confused deputy. nats-server lets a responder publish to whatever reply
subject its request named (``allow_responses``), so a client that may not write a result, a result event, a
checkpoint or the JetStream API asks the executor to write there for it. Every such request is dropped unrun and
counted; the genuine flow (a reply into the requester's inbox) is untouched. Since issue 34 a tenant's request
reaches the executor through its account's import, with a reply (``_R_...``) that leads back into the tenant's own
account: answered there, on whatever subject it named, it reaches no store; the executor's check still guards the
requests of the services' own account (the learner's rollouts)."""

from __future__ import annotations

import asyncio
import uuid

import msgspec
import nats.js.errors
import pytest

from conductor import metrics
from conductor.client import ConductorClient
from conductor.wire import encode
from schemas.rollout import ROLLOUT
from schemas.solve import SolveRequest, SolveResult, solve_subject
from schemas.tasks import Names, task_key

pytestmark = pytest.mark.nats

NAMES = Names.for_prefix("")
QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)


def _refused(subject: str = ROLLOUT.subject) -> float:
    return metrics.REGISTRY.get_sample_value("conductor_refused_replies_total", {"subject": subject}) or 0.0


def _targets(victim: str) -> list[str]:
    return [
        f"$KV.{NAMES.results_bucket}.{task_key('client', victim)}",  # pre-create or overwrite a stored result
        NAMES.result_subject(
            "client", victim
        ),  # a forged result event (dedup would then drop the genuine one)
        f"$KV.{NAMES.checkpoints_bucket}.{task_key('client', victim)}",  # a checkpoint resumed as the victim's state
        f"$JS.API.STREAM.PURGE.{NAMES.result_events_stream}",  # the JetStream API with the executor's grants
        NAMES.submit("client"),  # a durable task submitted in the executor's name
        "_INBOX.*.x",  # wildcards are never a reply
        "_INBOX",  # the inbox root itself is nobody's inbox
    ]


async def test_a_reply_subject_outside_an_inbox_changes_no_store(secured, services):
    """A tenant's solve aimed at a store is answered into the tenant's own account; the same aim from the learner,
    which shares the services' account, is dropped unrun and counted."""
    victim = f"victim-{uuid.uuid4().hex[:8]}"
    rogue, learner = await secured.connect("client"), await secured.connect("learner")
    before = _refused()
    try:
        async with ConductorClient(services) as client:
            # The victim's genuine durable task first: its stored result and its one event are the targets.
            await client.submit(SolveRequest(question=QUESTION, domain="math", reference="2", task_id=victim))
            genuine = await client.result(victim, wait=60)
            assert genuine.error is None, genuine
            forged = encode(SolveRequest(question="Answer 'forged'.", task_id=victim))
            for target in _targets(victim):
                await rogue.publish(solve_subject("client"), forged, reply=target)
                await learner.publish(ROLLOUT.subject, forged, reply=target)
            await rogue.flush()
            await learner.flush()
            await asyncio.sleep(1.0)  # what the executor would have run: a sim solve answers in milliseconds
            stored = await client.result(victim, wait=5)
        assert stored == genuine  # nothing overwrote it
        executor = await secured.connect("executor")
        js = executor.jetstream()
        events = NAMES.result_subject("client", victim)
        info = await js.stream_info(NAMES.result_events_stream, subjects_filter=events)
        assert info.state.subjects == {events: 1}  # still exactly the genuine event
        event = await js.get_last_msg(NAMES.result_events_stream, events)
        assert msgspec.json.decode(event.data, type=SolveResult) == genuine
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await (await js.key_value(NAMES.checkpoints_bucket)).get(task_key("client", victim))
        await executor.close()
    finally:
        await rogue.close()
        await learner.close()
    assert _refused() - before == len(_targets(victim))


async def test_a_request_into_the_requesters_inbox_is_answered(secured, services):
    """The plain nats-py request of an operator's client (its own inbox prefix) is answered as before."""
    nc = await secured.connect("client")
    try:
        msg = await nc.request(
            solve_subject("client"), encode(SolveRequest(question=QUESTION, reference="2")), timeout=30
        )
    finally:
        await nc.close()
    result = msgspec.json.decode(msg.data, type=SolveResult)
    assert result.error is None and result.answer, result
