"""Probe the reflection family from the outside (issue 34): on a secured embedded nats-server with two tenants and
the services running, every user outside the services (``client``, ``beta``, ``gateway``, ``trainer``) makes each
request it may make that nats-server or JetStream answers — a durable submit, a direct get of its own result, the
intake's consumer info, a training job — naming as its reply subject a store of the services (another tenant's
result, result event, cancel, checkpoint, dead letter; the gateway's spend, a worker's rate limit, a policy
version's meta), and counts per store how many answers were written there and how many were kept out.

    python -m scripts.probe_reflection

Exit status 1 when any reflection was written. tests/access/test_reflections.py runs the same family per store.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import nats
import nats.js.errors
from nats.js.api import KeyValueConfig, RetentionPolicy, StreamConfig

from conductor.wire import encode
from schemas.learner import TRAIN_SUBJECT
from schemas.solve import SolveRequest
from schemas.tasks import INTAKE_CONSUMER, Names, task_key

NAMES = Names.for_prefix("")
TENANTS = ("acme", "beta")
VICTIM = "acme"  # whose results, events, cancels, checkpoints and dead letters the others aim at
QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)
SETTLE_S = 0.2  # JetStream answers in microseconds; a reflection has landed well within this

Connect = Callable[[str], Awaitable[nats.NATS]]
"""A plain nats-py connection as the named user, with that user's inbox prefix."""


@dataclass(frozen=True)
class Door:
    """A request ``user`` may make that nats-server itself answers: its subject, body and headers."""

    user: str
    subject: str
    body: bytes = b""
    headers: dict[str, str] | None = None


def doors() -> list[Door]:
    """Every such request of the tenants and the trainer (a solve is answered by the executor, which answers only
    into inboxes and service-import replies: conductor.access.is_reply_inbox)."""
    out = []
    for user in ("client", "beta", "gateway"):
        task_id = uuid.uuid4().hex
        submit = encode(SolveRequest(question=QUESTION, domain="math", reference="2", task_id=task_id))
        bucket = NAMES.results_bucket
        out += [
            Door(user, NAMES.submit(user), submit, {"Nats-Msg-Id": task_key(user, task_id)}),
            Door(user, f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{user}.{task_id}"),
        ]
        if user != "gateway":
            out.append(Door(user, f"$JS.API.CONSUMER.INFO.{NAMES.tasks_stream}.{INTAKE_CONSUMER}"))
    out.append(Door("trainer", TRAIN_SUBJECT, b"{}", {"Nats-Msg-Id": uuid.uuid4().hex}))
    return out


@dataclass(frozen=True)
class Store:
    """Where a reflected answer would be kept: the stream behind ``subject`` (None for a subject a service hears,
    the cancels), read by ``reader``, a user that may; ``owner`` writes it anyway (its own account's bucket);
    ``keyed``: the stream keeps one message per subject (a bucket, the result events), so a write shows as a new
    last sequence rather than one more message."""

    subject: str
    stream: str | None
    reader: str
    owner: str | None = None
    keyed: bool = True


def stores(victim_id: str) -> dict[str, Store]:
    key = task_key(VICTIM, victim_id)
    meta = base64.urlsafe_b64encode(f"v-{victim_id}".encode()).decode()
    n = NAMES
    return {
        "results": Store(f"$KV.{n.results_bucket}.{key}", f"KV_{n.results_bucket}", "executor"),
        "result-events": Store(n.result_subject(VICTIM, victim_id), n.result_events_stream, "executor"),
        "cancel": Store(f"conductor.cancel.{key}", None, "executor", keyed=False),
        "gateway-spend": Store(
            f"$KV.{n.gateway_quota_bucket}.k-{victim_id}",
            f"KV_{n.gateway_quota_bucket}",
            "gateway",
            "gateway",
        ),
        "worker-limits": Store(
            f"$KV.{n.limits_bucket}.w-{victim_id}", f"KV_{n.limits_bucket}", "worker-adapter"
        ),
        "policy-versions": Store(f"$O.{n.policies_bucket}.M.{meta}", f"OBJ_{n.policies_bucket}", "learner"),
        "dead-letters": Store(f"{n.dead_prefix}.{key}", n.dead_stream, "executor", keyed=False),
        "checkpoints": Store(f"$KV.{n.checkpoints_bucket}.{key}", f"KV_{n.checkpoints_bucket}", "executor"),
    }


async def ensure_stores(connect: Connect) -> None:
    """Every store exists, made as its owner makes it, so that a reflection has somewhere to land: the running
    services made theirs; the policy bucket and the training queue are the learner's, which need not run."""
    learner, gateway = await connect("learner"), await connect("gateway")
    try:
        js = learner.jetstream()
        try:
            await js.object_store(NAMES.policies_bucket)
        except nats.js.errors.BucketNotFoundError:
            await js.create_object_store(NAMES.policies_bucket)
        try:
            await js.stream_info(NAMES.learner_jobs_stream)
        except nats.js.errors.NotFoundError:
            queue = RetentionPolicy.WORK_QUEUE
            await js.add_stream(
                StreamConfig(name=NAMES.learner_jobs_stream, subjects=[TRAIN_SUBJECT], retention=queue)
            )
        gjs = gateway.jetstream()
        try:
            await gjs.key_value(NAMES.gateway_quota_bucket)
        except nats.js.errors.BucketNotFoundError:
            await gjs.create_key_value(KeyValueConfig(bucket=NAMES.gateway_quota_bucket))
    finally:
        await learner.close()
        await gateway.close()


async def _mark(
    connect: Connect, store: Store
) -> tuple[Callable[[], Awaitable[int]], Callable[[], Awaitable[None]]]:
    """A reading of ``store`` that changes whenever something lands on its subject; and how to stop reading."""
    nc = await connect(store.reader)
    if store.stream is None:
        heard: list[object] = []

        async def on_msg(msg: object) -> None:
            heard.append(msg)

        await nc.subscribe(store.subject, cb=on_msg)
        await nc.flush()

        async def mark() -> int:
            return len(heard)

        return mark, nc.close
    js, stream = nc.jetstream(), store.stream

    async def mark() -> int:
        """Messages on the subject; for a keyed stream the last one's sequence."""
        info = await js.stream_info(stream, subjects_filter=store.subject)
        held = sum((info.state.subjects or {}).values())
        if held and store.keyed:
            return (await js.get_last_msg(stream, store.subject)).seq
        return held

    return mark, nc.close


async def reflect(connect: Connect, store: Store) -> tuple[list[str], int]:
    """Aim every door (but the store owner's) at ``store``: the doors whose answer was written there, and how many
    were tried."""
    mark, stop = await _mark(connect, store)
    written, tried = [], 0
    try:
        for door in doors():
            if door.user == store.owner:
                continue  # the bucket's own user writes it anyway (its own account, its own JetStream)
            before = await mark()
            nc = await connect(door.user)
            try:
                await nc.publish(door.subject, door.body, reply=store.subject, headers=door.headers)
                await nc.flush()
                await asyncio.sleep(SETTLE_S)
            finally:
                await nc.close()
            tried += 1
            if await mark() != before:
                written.append(f"{door.user} via {door.subject}")
    finally:
        await stop()
    return written, tried


async def probe(connect: Connect) -> dict[str, tuple[int, int]]:
    """Per store: (reflections written, reflections kept out)."""
    await ensure_stores(connect)
    counts = {}
    for name, store in stores(uuid.uuid4().hex[:12]).items():
        written, tried = await reflect(connect, store)
        counts[name] = (len(written), tried - len(written))
    return counts


async def _main() -> int:
    from conductor.app.runtime import create_services, running
    from conductor.natsserver import NatsServer, free_port
    from conductor.settings import CommonSettings

    with NatsServer.secured(tenants=TENANTS) as server:
        assert server.passwords is not None
        passwords = server.passwords

        async def connect(user: str) -> nats.NATS:
            url = f"nats://{user}:{passwords[user]}@127.0.0.1:{server.port}"
            return await nats.connect(url, inbox_prefix=f"_INBOX.{user}", max_reconnect_attempts=0)

        env = {
            **server.env(),
            "CONDUCTOR_LOG_LEVEL": "ERROR",
            "CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS": "true",
            "CONDUCTOR_GATEWAY_PORT": str(free_port()),
            "CONDUCTOR_METRICS_PORT": "0",
        }
        roles = ["executor", "planner", "worker-adapter", "verifier", "gateway"]
        async with running(create_services(roles, env), CommonSettings.from_env(env), name="probe"):
            counts = await probe(connect)
    print(f"{'store':<16} {'written':>7} {'kept out':>8}")
    for name, (written, kept) in counts.items():
        print(f"{name:<16} {written:>7} {kept:>8}")
    total = sum(w for w, _ in counts.values()), sum(k for _, k in counts.values())
    print(f"{'total':<16} {total[0]:>7} {total[1]:>8}")
    return 1 if total[0] else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
