"""Issue 19, item 4: a tenant's tasks, progress and results are readable only by it. Two tenants, the NATS users
`acme` and `beta` (``CONDUCTOR_TENANTS``), beside `client` and the gateway, on a nats-server with the authorization
of conductor/access.py and every service running, each as its own user (docs/tenancy.md).

Before (schema 8) there was one `client` user for everyone: any client, and the gateway, heard every task's
progress and result events, read every stored result (and listed their keys), and the gateway's task ids carried a
prefix of the SHA-256 of the API key that made them. Each test here fails on that code."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
import msgspec
import nats.errors
import pytest

from conductor.client import ConductorClient, ResultNotReadyError
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode
from schemas.solve import CancelRequest, ProgressEvent, SolveRequest, SolveResult, cancel_subject
from schemas.tasks import Names
from services.gateway.keys import entry_toml, new_key
from tests.access.conftest import GATEWAY_PORT, TENANTS, services_on
from tests.gateway.conftest import slow_pool

pytestmark = pytest.mark.nats

TENANT, OTHER = TENANTS
NAMES = Names.for_prefix("")
QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)
OTHER_QUESTION = "Find the sum of all positive divisors of 36."  # also in it (answer 91)


def as_tenant(settings: CommonSettings, tenant: str) -> CommonSettings:
    """The settings a tenant's `conductor solve` runs with: the same credentials file, CONDUCTOR_NATS_USER=tenant."""
    return msgspec.structs.replace(settings, nats_user=tenant)


def refusals(errors: list[str], verb: str) -> list[str]:
    return [e for e in errors if f"permissions violation for {verb}" in e.lower()]


async def _until(condition, what: str, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_tenant_hears_its_own_progress_and_result_events_and_nobody_elses(secured, services):
    """`beta` may not subscribe to `acme`'s progress or result events (nor to everyone's), and hears nothing of
    `acme`'s tasks on its own subjects; `acme` gets its progress, its reply and its result event as before."""
    errors: list[str] = []
    heard: list[str] = []
    spy = await secured.connect(OTHER, errors)
    mine = await secured.connect(TENANT)

    async def overheard(msg) -> None:
        heard.append(msg.subject)

    events: list[SolveResult] = []

    async def own_event(msg) -> None:
        events.append(msgspec.json.decode(msg.data, type=SolveResult))

    stolen = [
        f"conductor.progress.{TENANT}.>",
        f"conductor.results.{TENANT}.>",
        "conductor.progress.>",
        "conductor.results.>",
    ]
    try:
        for subject in [*stolen, f"conductor.progress.{OTHER}.>", f"conductor.results.{OTHER}.>"]:
            await spy.subscribe(subject, cb=overheard)
        await spy.flush()
        await mine.subscribe(f"conductor.results.{TENANT}.>", cb=own_event)
        await mine.flush()
        progress: list[ProgressEvent] = []
        async with ConductorClient(as_tenant(services, TENANT)) as client:
            assert client.tenant == TENANT
            solved = await client.solve(
                SolveRequest(question=QUESTION, domain="math", reference="2"),
                timeout=60,
                on_progress=progress.append,
            )
            task_id = await client.submit(SolveRequest(question=QUESTION, domain="math", reference="2"))
            stored = await client.result(task_id, wait=60)
        await _until(lambda: events, "acme's result event")
        await asyncio.sleep(0.3)  # anything the spy could have heard has arrived by now
    finally:
        await spy.close()
        await mine.close()
    assert solved.error is None and stored.error is None and stored.verdict is not None
    assert [e.kind for e in progress][-1] == "done" and {e.task_id for e in progress} == {solved.task_id}
    assert events == [stored]
    assert heard == [], heard
    refused = refusals(errors, "subscription")
    assert len(refused) == len(stolen) and all(any(s in e for e in refused) for s in stolen), errors


async def test_a_tenant_reads_only_its_own_stored_results_even_under_the_same_task_id(secured, services):
    """`beta` finds nothing under `acme`'s task id (its own name is looked up), and every way into the results
    bucket past its own keys is refused by the server: the key by name, the key in a request body (direct or
    through the stream leader), the key listing of stream info, a watch. The same task id, submitted by both, is
    two tasks with two results; the default tenant `client` reads neither."""
    task_id = f"same-{uuid.uuid4().hex[:8]}"
    async with (
        ConductorClient(as_tenant(services, TENANT)) as a,
        ConductorClient(as_tenant(services, OTHER)) as b,
    ):
        await a.submit(SolveRequest(question=QUESTION, domain="math", reference="2", task_id=task_id))
        mine = await a.result(task_id, wait=60)
        with pytest.raises(ResultNotReadyError):
            await b.result(task_id)
        await b.submit(
            SolveRequest(question=OTHER_QUESTION, task_id=task_id)
        )  # deduplicated per tenant, not across
        theirs = await b.result(task_id, wait=60)
        assert await a.result(task_id) == mine  # untouched by beta's task of the same id
    async with ConductorClient(services) as client:
        with pytest.raises(ResultNotReadyError):
            await client.result(task_id)
    assert mine.error is None and mine.verdict is not None and mine.task_id == task_id
    assert (
        theirs.error is None and theirs.verdict is None and theirs.task_id == task_id
    )  # its own: no reference

    bucket, stream = NAMES.results_bucket, f"KV_{NAMES.results_bucket}"
    key = f"$KV.{bucket}.{TENANT}.{task_id}"
    attempts = [
        (f"$JS.API.DIRECT.GET.{stream}.{key}", b""),  # acme's key, named
        (f"$JS.API.DIRECT.GET.{stream}.$KV.{bucket}.>", b""),  # any key
        (f"$JS.API.DIRECT.GET.{stream}", json.dumps({"last_by_subj": key}).encode()),  # the key in the body
        (
            f"$JS.API.STREAM.MSG.GET.{stream}",
            json.dumps({"last_by_subj": key}).encode(),
        ),  # through the leader
        (f"$JS.API.STREAM.INFO.{stream}", json.dumps({"subjects_filter": ">"}).encode()),  # every key's name
        (f"$JS.API.CONSUMER.CREATE.{stream}", b"{}"),  # a watch of the bucket
    ]
    errors: list[str] = []
    spy = await secured.connect(OTHER, errors)
    try:
        for subject, body in attempts:
            with pytest.raises(nats.errors.TimeoutError):
                await spy.request(subject, body, timeout=0.5)
        await _until(lambda: len(refusals(errors, "publish")) == len(attempts), "every refusal")
    finally:
        await spy.close()


async def test_a_tenant_cannot_cancel_another_tenants_task(secured, tmp_path):
    """`acme` runs three 1-second steps; `beta`'s cancel on acme's subject is refused by the server, and its cancel
    of the same task id on its own subject names its own task (there is none), so acme's runs to its end. acme's
    own cancel still stops the next one after its first step."""
    async with services_on(secured, CONDUCTOR_POOL=str(slow_pool(tmp_path, 1.0))) as settings:
        errors: list[str] = []
        spy, owner = await secured.connect(OTHER, errors), await secured.connect(TENANT)
        try:
            async with ConductorClient(as_tenant(settings, TENANT)) as a:
                req = SolveRequest(
                    question=QUESTION, policy="refine:3", task_id=f"slow-{uuid.uuid4().hex[:8]}"
                )
                running = asyncio.create_task(a.solve(req, timeout=60))
                await asyncio.sleep(0.5)  # the first step runs
                ask = encode(CancelRequest(task_id=req.task_id or "", reason="not yours"))
                await spy.publish(cancel_subject(TENANT, req.task_id or ""), ask)
                await spy.publish(cancel_subject(OTHER, req.task_id or ""), ask)
                await spy.flush()
                ran = await running

                again = msgspec.structs.replace(req, task_id=f"slow-{uuid.uuid4().hex[:8]}")
                running = asyncio.create_task(a.solve(again, timeout=60))
                await asyncio.sleep(0.5)
                await owner.publish(
                    cancel_subject(TENANT, again.task_id or ""),
                    encode(CancelRequest(task_id=again.task_id or "", reason="mine")),
                )
                stopped = await running
        finally:
            await spy.close()
            await owner.close()
    assert ran.error is None and [len(r.steps) for r in ran.workflows] == [3], ran.error
    assert [e for e in refusals(errors, "publish")] and all(
        f"conductor.cancel.{TENANT}." in e for e in refusals(errors, "publish")
    )
    assert (
        stopped.error is not None
        and stopped.error.code == ErrorCode.CANCELLED
        and "mine" in stopped.error.message
    )
    assert sum(s.error is None for r in stopped.workflows for s in r.steps) == 1


async def test_through_the_gateway_a_key_fetches_only_its_own_tasks(secured, tmp_path):
    """The gateway is one tenant on the bus and keeps its API keys apart itself: two keys each make a durable task
    and fetch it; neither fetches the other's (404). A task id names its key by the key's name, never by a digest of
    the key. On the bus, the gateway's results are its own: the tenant `client` reads none of them."""
    key_a, entry_a = new_key("team-a")
    key_b, entry_b = new_key("team-b")
    keys = tmp_path / "keys.toml"
    keys.write_text(entry_toml(entry_a) + entry_toml(entry_b))
    url = f"http://127.0.0.1:{GATEWAY_PORT}"

    def auth(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    ids: dict[str, str] = {}
    answers: dict[str, str] = {}
    async with services_on(secured, CONDUCTOR_GATEWAY_KEYS_FILE=str(keys)) as settings:
        async with aiohttp.ClientSession() as http:
            for name, key in (("a", key_a), ("b", key_b)):
                body = {
                    "model": "conductor",
                    "messages": [{"role": "user", "content": QUESTION}],
                    "durable": True,
                }
                async with http.post(f"{url}/v1/chat/completions", json=body, headers=auth(key)) as resp:
                    assert resp.status == 200, await resp.text()
                    reply = await resp.json()
                ids[name], answers[name] = (
                    reply["conductor"]["task_id"],
                    reply["choices"][0]["message"]["content"],
                )
            fetched = {}
            for name, key, other in (("a", key_a, "b"), ("b", key_b, "a")):
                async with http.get(f"{url}/v1/conductor/tasks/{ids[name]}", headers=auth(key)) as resp:
                    assert resp.status == 200, await resp.text()
                    fetched[name] = (await resp.json())["choices"][0]["message"]["content"]
                async with http.get(f"{url}/v1/conductor/tasks/{ids[other]}", headers=auth(key)) as resp:
                    assert resp.status == 404, await resp.text()
        async with ConductorClient(settings) as client:
            for task_id in ids.values():
                with pytest.raises(ResultNotReadyError):
                    await client.result(task_id)
        errors: list[str] = []
        spy = await secured.connect("client", errors)
        try:
            bucket = NAMES.results_bucket
            with pytest.raises(nats.errors.TimeoutError):
                await spy.request(
                    f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.gateway.{ids['a']}", b"", timeout=0.5
                )
            await _until(lambda: refusals(errors, "publish"), "the refusal")
        finally:
            await spy.close()
    assert fetched == answers and all(answers.values())
    assert ids["a"].startswith("team-a.") and ids["b"].startswith("team-b.")
    for name, entry in (("a", entry_a), ("b", entry_b)):
        assert entry.sha256[:8] not in ids[name]  # no digest of the key travels in its task ids
