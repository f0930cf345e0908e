"""Who may do what on the bus, declared once: per role, the subjects it may publish and subscribe to.

Rendered two ways from this one table: the ``accounts`` block of the nats-server that ``demo``, ``serve all`` and
``eval`` start (``accounts``), and the permission lists and doors of the Helm chart (``chart_values``; a test keeps
charts/conductor/values.yaml equal to it, and the chart renders the same block from them). Subjects, streams and buckets come from their declarations in
``schemas/`` (``RequestReply``, ``Event``, ``Names``), so a renamed subject moves its permission with it.

The model (issue 8, "anyone on the bus is believed"): clients submit tasks and read results; a task is cancelled
only by the role its request names as ``owner``, each role publishing on ``conductor.cancel.<its own name>.>``
only (issue 19, item 3), and heard only by executors; only executors write results, result events and checkpoints; only worker-adapters receive ``work`` and only verifiers ``verify``; only
the worker-adapter writes its call ledger, cache and limits. Nobody subscribes to another user's inbox: each user
connects with the inbox prefix ``_INBOX.<user>`` and may subscribe to that prefix only, so no one can watch another's
replies or liveness beats. A responder never gets a blanket publish to ``_INBOX.>``: it answers through
``allow_responses`` — the server lets it publish to a request's reply subject only after delivering that request
to it, ``max`` messages within ``expires``. Liveness beats (conductor/liveness.py) are several messages to one
reply subject, one per beat period while a call runs, so ``max`` covers the longest call at the fastest beat a
server sends (``MIN_BEAT_S``) and ``expires`` the longest call a role serves (``RESPONSE_WINDOW_S``).

Rollouts (schemas/rollout.py): only the learner sends them — a batch on ``conductor.rollout``, or items into the
work queue ``conductor.rollout.work.>`` — only executors fetch items (nobody subscribes to the work subjects: an item
carries its reference) and only executors publish outcomes on ``conductor.rollout.results.>``, which only the
learner hears.

The learner takes training jobs from its own work-queue stream and publishes their progress; it alone writes
policy versions (its Object Store ``CONDUCTOR_POLICIES``) and announces them. Planners read that bucket and hear
the announcements, nothing more; only the ``trainer`` (an operator) submits training jobs; clients and trainers
follow their progress and the announcements.

Never granted: ``>``, deleting or purging a stream or bucket (a published policy version is immutable: the learner
puts a name once and never purges it), and consumers on another role's streams.

Tenants (issue 19, item 4; docs/tenancy.md). A tenant is a NATS user that submits tasks: ``client`` (the default
one, `conductor solve` and `result`), the ``gateway`` (which keeps its API keys apart itself), and every name an
operator lists (``CONDUCTOR_TENANTS`` for the embedded server, ``auth.tenants`` in the chart), each a user with the
client's grant on its own name. Every subject of the public API carries the tenant's name, and a tenant may use
only its own: it sends on ``conductor.solve.<tenant>`` and ``conductor.tasks.submit.<tenant>``, cancels on
``conductor.cancel.<tenant>.>``, hears ``conductor.progress.<tenant>.>`` and ``conductor.results.<tenant>.>``, and
reads stored results only through ``$JS.API.DIRECT.GET.KV_CONDUCTOR_RESULTS.$KV.CONDUCTOR_RESULTS.<tenant>.>`` —
the direct get that names the key in its subject. Never the bare ``DIRECT.GET.<stream>`` or ``STREAM.MSG.GET``,
whose key is in the request body where no permission can see it, nor ``STREAM.INFO``, which lists every key, nor a
consumer (a watch) on the bucket. The executor reads the tenant from the subject a task arrived on (only that user
may publish there) and keys everything it keeps by ``<tenant>.<task_id>`` (``schemas.tasks.task_key``).

Accounts (issue 34, item 1; docs/tenancy.md). A permission sees the subject a user publishes to, never the reply
subject it names, and JetStream answers (PubAck, direct get, API response) into the requester's account on that
reply subject, where a stream stores it. So the services share one account (``SERVICES_ACCOUNT``) that owns
JetStream, and every other user — each tenant, the gateway, the trainer — is alone in its own account, importing
only its ``doors`` (each exported to that one account, under the same name): whatever the server answers it lands
in its own account, where no store of the services lives.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from conductor.liveness import MIN_BEAT_S
from schemas.contract import Event, RequestReply, wildcard
from schemas.learner import JOBS_CONSUMER, LEARNER_PROGRESS, POLICY_VERSIONS, TRAIN_SUBJECT
from schemas.plan import PLAN
from schemas.rollout import ROLLOUT, ROLLOUT_RESULTS, ROLLOUT_WORK, ROLLOUTS_CONSUMER
from schemas.solve import CANCEL, PROGRESS, SOLVE, solve_subject, valid_tenant
from schemas.tasks import INTAKE_CONSUMER, RESULTS, Names
from schemas.verify import VERIFY
from schemas.work import WORK

CLIENT = "client"
TRAINER = "trainer"
GATEWAY = "gateway"
ROLES = ("client", "executor", "planner", "worker-adapter", "verifier", "gateway", "learner", "trainer")
"""Every NATS user of a deployment besides its extra tenants: the services by their ``serve`` names, ``client`` for
`conductor solve`, `conductor result`, `conductor eval` and any operator's client (the default tenant), ``trainer``
for the operator who submits training jobs (a job's policy may become the served one: an operator's act, never a
client's)."""

TENANT_PLACEHOLDER = "{tenant}"
"""Stands for a tenant's name in the chart's tenant permissions (``chart_values``), replaced per tenant."""

RESPONSE_WINDOW_S: Mapping[str, int] = {
    "executor": 3600,  # a solve or a rollout batch: as long as its requester waits (the CLI's default 600 s)
    "planner": 900,  # three times the executor's default plan timeout (300 s)
    "worker-adapter": 1800,  # twice the executor's default work timeout (900 s), provider retries included
    "verifier": 900,  # three times the executor's default verify timeout (300 s)
}
"""Seconds a responder may answer a request and beat on it (``allow_responses.expires``). Wider windows cost the
server memory: it remembers every reply subject it delivered to the role for this long. A deployment that raises a
call timeout past its window gets a refused (late) reply, which its requester sees as that timeout."""

API = "$JS.API"

SERVICES_ACCOUNT = "conductor"
"""The NATS account of the services (every role of ``_GRANTS`` but the ``trainer``): it owns JetStream — the task
queue, the results bucket, checkpoints, dead letters, the worker-adapter's buckets, policy versions. Every other
user (``client``, ``gateway``, ``trainer``, each listed tenant) is alone in an account named after it, which imports
only its ``doors`` from this one. No tenant may be named this."""

JETSTREAM_TENANTS = frozenset({"gateway"})
"""Tenant accounts with JetStream of their own: the gateway keeps its keys' spend there (its quota bucket), out of
every other account's reach."""


@dataclass(frozen=True, slots=True)
class Door:
    """A subject of the services' account that one outside account imports under the same name. ``service``: the
    outside user publishes there and any answer (a reply, a PubAck, a direct get's message, an API response) comes
    back into its own account, where no service store lives, whatever reply subject it named. ``stream``: it hears
    what the services publish there. ``window_s``: a service answered by several messages (the reply and liveness
    beats), the import's mapping kept this long after each (``response_threshold``)."""

    kind: Literal["service", "stream"]
    subject: str
    window_s: int | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """What one role may do. ``subscribe`` excludes the user's own inbox prefix (``permissions`` adds it);
    ``window_s`` is set for roles that answer requests (``allow_responses``)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    window_s: int | None = None

    @property
    def max_responses(self) -> int | None:
        """The reply plus a beat every ``MIN_BEAT_S`` for the whole window."""
        return None if self.window_s is None else math.ceil(self.window_s / MIN_BEAT_S) + 1


INBOX_ROOT = "_INBOX"


def inbox_prefix(user: str) -> str:
    """The inbox prefix a user connects with (nats-py ``inbox_prefix``): replies to it land under this only."""
    return f"{INBOX_ROOT}.{user}"


RESPONSE_ROOT = "_R_"
"""The reply subjects nats-server makes for a request that came through a service import (a tenant's solve): in the
services' account the request carries ``_R_.<token>.<token>``, which leads back to the requester's own account."""


def is_reply_inbox(reply: str) -> bool:
    """Whether a responder may answer (reply and beats) to ``reply``: only a concrete subject inside some user's
    inbox, ``_INBOX.<user>.<token>[...]``, or a service import's response subject ``_R_.<token>.<token>``.
    nats-server lets a responder publish to *any* reply subject it was handed (``allow_responses``), so without
    this check a requester could aim the executor's reply at ``$KV.CONDUCTOR_RESULTS.<id>`` or
    ``conductor.results.<id>`` and write, through the executor's grants, what it may not write itself (issue 19,
    item 1). Every inbox is readable by its owning user only (``permissions``), a requester drops replies to tokens
    it did not send (``conductor.endpoints.Requester``), and a ``_R_`` subject reaches only the account that sent
    the request (no stream stores either root), so a reply aimed at another's inbox reaches nobody's state."""
    # On every request a service answers: membership tests, no generator per check.
    if " " in reply or "\t" in reply or "\r" in reply or "\n" in reply:
        return False
    tokens = reply.split(".")
    if "" in tokens or "*" in tokens or ">" in tokens:  # an empty token, or a wildcard one
        return False
    return (len(tokens) >= 3 and tokens[0] == INBOX_ROOT) or (len(tokens) == 3 and tokens[0] == RESPONSE_ROOT)


def _subject(contract: RequestReply, prefix: str) -> str:
    """What a responder subscribes to: every concrete subject of the contract (a tenant's solve included)."""
    return prefix + wildcard(contract.subject)


def _own(event: Event, prefix: str, tenant: str) -> str:
    """Every subject of an event that belongs to ``tenant`` (its first parameter)."""
    return prefix + event.subject(tenant=tenant, task_id=">")


def _own_results(n: Names, tenant: str) -> str:
    """The stored results of ``tenant``: a direct get names the key in its subject, so this is its keys only."""
    bucket = n.results_bucket
    return f"{API}.DIRECT.GET.KV_{bucket}.$KV.{bucket}.{tenant}.>"


def _all(event: Event, prefix: str) -> str:
    """Every concrete subject of an event: its address up to the first parameter, then ``>`` (ids may hold dots)."""
    return prefix + event.address.split("{", 1)[0] + ">"


def _cancels_of(tenant: str, prefix: str) -> str:
    """The cancel subjects of ``tenant``'s tasks: only that user publishes there."""
    return prefix + CANCEL.subject(tenant=tenant, task_id=">")


def _stream(name: str, *ops: str) -> list[str]:
    return [f"{API}.STREAM.{op}.{name}" for op in ops]


def _reads(stream: str) -> list[str]:
    """Info and single-message reads (direct or through the leader) of one stream."""
    return [*_stream(stream, "INFO", "MSG.GET"), f"{API}.DIRECT.GET.{stream}", f"{API}.DIRECT.GET.{stream}.>"]


def _kv_read(bucket: str) -> list[str]:
    return _reads(f"KV_{bucket}")


def _kv_write(bucket: str) -> list[str]:
    """Create (or bind to) the bucket and put, create, update and delete its keys; never purge or delete it."""
    return [*_kv_read(bucket), *_stream(f"KV_{bucket}", "CREATE"), f"$KV.{bucket}.>"]


def _watch(stream: str) -> list[str]:
    """Ordered consumers (a KV watch, an object read) on one stream, delivered to the user's inbox."""
    return [
        f"{API}.CONSUMER.CREATE.{stream}",
        f"{API}.CONSUMER.CREATE.{stream}.>",
        f"{API}.CONSUMER.DELETE.{stream}.>",
        f"{API}.CONSUMER.INFO.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _client_doors(n: Names, p: str, tenant: str) -> tuple[Door, ...]:
    """A tenant's doors: its own tasks in, its own progress, result events and stored results out (module
    docstring); training progress and policy announcements are public, heard, never written."""
    return (
        *_tenant_doors(n, p, tenant),
        Door("service", f"{API}.CONSUMER.INFO.{n.tasks_stream}.{INTAKE_CONSUMER}"),  # `conductor status`
        Door("stream", _all(LEARNER_PROGRESS, p)),
        Door("stream", _all(POLICY_VERSIONS, p)),
    )


def _tenant_doors(n: Names, p: str, tenant: str) -> tuple[Door, ...]:
    """What every tenant (the gateway too) may use of the services, each subject naming ``tenant`` alone."""
    return (
        Door("service", p + solve_subject(tenant), RESPONSE_WINDOW_S["executor"]),
        Door("service", n.submit(tenant)),
        Door("service", _cancels_of(tenant, p)),
        Door("service", _own_results(n, tenant)),
        Door("stream", _own(PROGRESS, p, tenant)),
        Door("stream", _own(RESULTS, p, tenant)),
    )


def _through(doors: Iterable[Door], *own: str) -> Grant:
    """The grant of a user in its own account: its doors (and ``own`` subjects of its account's JetStream), nothing
    else — a second fence behind the imports, in case an account ever gets another import."""
    doors = tuple(doors)
    return Grant(
        publish=(*(d.subject for d in doors if d.kind == "service"), *own),
        subscribe=tuple(d.subject for d in doors if d.kind == "stream"),
    )


def _client(n: Names, p: str, tenant: str) -> Grant:
    """A tenant: its doors (``_client_doors``)."""
    return _through(_client_doors(n, p, tenant))


def _trainer_doors(n: Names, p: str) -> tuple[Door, ...]:
    """An operator submitting training jobs (schemas/learner.py) and following them. The learner confines every
    path a job names to its data directory and never overwrites a published version (services/learner/app.py)."""
    return (
        Door("service", p + TRAIN_SUBJECT),
        Door("stream", _all(LEARNER_PROGRESS, p)),
        Door("stream", _all(POLICY_VERSIONS, p)),
    )


def _trainer(n: Names, p: str) -> Grant:
    return _through(_trainer_doors(n, p))


def _executor(n: Names, p: str) -> Grant:
    tasks = n.tasks_stream
    return Grant(
        publish=(
            _subject(PLAN, p),
            _subject(WORK, p),
            _subject(VERIFY, p),
            _all(PROGRESS, p),
            _all(RESULTS, p),
            f"{n.dead_prefix}.>",
            f"{API}.INFO",
            *_stream(tasks, "CREATE", "UPDATE", "INFO"),
            f"{API}.CONSUMER.DURABLE.CREATE.{tasks}.{INTAKE_CONSUMER}",
            f"{API}.CONSUMER.CREATE.{tasks}.{INTAKE_CONSUMER}",
            f"{API}.CONSUMER.CREATE.{tasks}.{INTAKE_CONSUMER}.>",
            f"{API}.CONSUMER.INFO.{tasks}.{INTAKE_CONSUMER}",
            f"{API}.CONSUMER.MSG.NEXT.{tasks}.{INTAKE_CONSUMER}",
            f"$JS.ACK.{tasks}.>",  # acks and in-progress marks, for as long as a task runs
            *_stream(n.result_events_stream, "CREATE", "UPDATE"),
            *_reads(n.result_events_stream),
            *_stream(n.dead_stream, "CREATE", "UPDATE", "INFO"),
            *_kv_write(n.results_bucket),
            *_stream(f"KV_{n.results_bucket}", "UPDATE"),  # direct gets on, for a bucket made before schema 9
            *_kv_write(n.checkpoints_bucket),
            *_rollout_puller(n, p),
        ),
        subscribe=(_subject(SOLVE, p), _subject(ROLLOUT, p), _all(CANCEL, p)),
        window_s=RESPONSE_WINDOW_S["executor"],
    )


def _rollout_puller(n: Names, p: str) -> list[str]:
    """Pulled rollouts (services/executor/rollout_queue.py): declare the work queue and its one consumer, fetch from
    it (into the executor's own inbox), acknowledge, and answer on the results subjects. Nobody subscribes to the
    work subjects (an item carries its reference, which the policy must never see); only executors fetch."""
    rollouts, consumer = n.rollouts_stream, ROLLOUTS_CONSUMER
    return [
        *_stream(rollouts, "CREATE", "UPDATE", "INFO"),
        f"{API}.CONSUMER.DURABLE.CREATE.{rollouts}.{consumer}",
        f"{API}.CONSUMER.CREATE.{rollouts}.{consumer}",
        f"{API}.CONSUMER.CREATE.{rollouts}.{consumer}.>",
        f"{API}.CONSUMER.INFO.{rollouts}.{consumer}",
        f"{API}.CONSUMER.MSG.NEXT.{rollouts}.{consumer}",
        f"$JS.ACK.{rollouts}.>",  # acks, in-progress marks and naks while an item runs
        _all(ROLLOUT_RESULTS, p),
    ]


def _planner(n: Names, p: str) -> Grant:
    """The `worker:<name>` policy writes its workflow through the worker-adapter (planner/policies/worker.py); the
    local backend reads policy versions (services/planner/versions.py): the bucket read-only, the announcements."""
    versions = f"OBJ_{n.policies_bucket}"
    return Grant(
        # nats-py's Object Store reads (get, list) find the bucket's stream by subject: STREAM.NAMES answers with
        # stream names only.
        publish=(_subject(WORK, p), *_reads(versions), *_watch(versions), f"{API}.STREAM.NAMES"),
        subscribe=(_subject(PLAN, p), _all(POLICY_VERSIONS, p)),
        window_s=RESPONSE_WINDOW_S["planner"],
    )


def _worker_adapter(n: Names, p: str) -> Grant:
    return Grant(
        publish=(
            f"{API}.INFO",
            *_kv_write(n.calls_bucket),
            *_kv_write(n.cache_bucket),
            *_kv_write(n.limits_bucket),
            *_watch(f"KV_{n.limits_bucket}"),  # every replica mirrors the limits (worker_adapter/limits.py)
            *_watch(
                f"KV_{n.calls_bucket}"
            ),  # a call another replica claimed is awaited on its key (ledger.py)
        ),
        subscribe=(_subject(WORK, p),),
        window_s=RESPONSE_WINDOW_S["worker-adapter"],
    )


def _verifier(n: Names, p: str) -> Grant:
    return Grant(publish=(), subscribe=(_subject(VERIFY, p),), window_s=RESPONSE_WINDOW_S["verifier"])


def _gateway(n: Names, p: str, tenant: str) -> Grant:
    """A tenant of the public API (services/gateway/bus.py) with its own quota bucket, in its own account's
    JetStream; it keeps its API keys' tasks apart itself (services/gateway/calls.py). Its doors are every tenant's
    (a hung-up HTTP client's task is cancelled, services/gateway/calls.py)."""
    return _through(_tenant_doors(n, p, tenant), *_kv_write(n.gateway_quota_bucket))


def _learner(n: Names, p: str) -> Grant:
    """Training jobs from its durable work queue (schemas/learner.py), their progress out; rollouts in, rewards out
    (schemas/rollout.py: work items into the queue and their outcomes heard, whether anyone pulls them, or a batch by
    request/reply); policy versions in its own Object Store, announced."""
    bucket, stream, jobs = n.policies_bucket, f"OBJ_{n.policies_bucket}", n.learner_jobs_stream
    return Grant(
        publish=(
            _subject(ROLLOUT, p),
            _all(ROLLOUT_WORK, p),
            f"{API}.CONSUMER.INFO.{n.rollouts_stream}.{ROLLOUTS_CONSUMER}",
            f"{API}.INFO",
            *_stream(jobs, "CREATE", "UPDATE", "INFO"),
            f"{API}.CONSUMER.DURABLE.CREATE.{jobs}.{JOBS_CONSUMER}",
            f"{API}.CONSUMER.CREATE.{jobs}.{JOBS_CONSUMER}",
            f"{API}.CONSUMER.CREATE.{jobs}.{JOBS_CONSUMER}.>",
            f"{API}.CONSUMER.INFO.{jobs}.{JOBS_CONSUMER}",
            f"{API}.CONSUMER.MSG.NEXT.{jobs}.{JOBS_CONSUMER}",
            f"$JS.ACK.{jobs}.>",  # acks, naks and in-progress marks while a job trains
            _all(LEARNER_PROGRESS, p),
            *_stream(stream, "CREATE", "UPDATE"),  # never PURGE: a published version is never replaced
            *_reads(stream),
            *_watch(stream),
            f"$O.{bucket}.>",
            _all(POLICY_VERSIONS, p),
        ),
        subscribe=(_all(ROLLOUT_RESULTS, p),),
    )


_TENANT_GRANTS = {"client": _client, "gateway": _gateway}
"""Roles whose user is a tenant: their grant is on the user's own name."""

_GRANTS = {
    "executor": _executor,
    "planner": _planner,
    "worker-adapter": _worker_adapter,
    "verifier": _verifier,
    "learner": _learner,
    "trainer": _trainer,
}


def grant(role: str, prefix: str = "", *, tenant: str | None = None) -> Grant:
    """What ``role`` may do under subject prefix ``prefix`` (tests get their own streams and buckets); a tenant
    role's grant is on ``tenant`` (default: the role's own name)."""
    names = Names.for_prefix(prefix)
    if role in _TENANT_GRANTS:
        return _TENANT_GRANTS[role](names, prefix, tenant or role)
    try:
        build = _GRANTS[role]
    except KeyError:
        raise ValueError(f"unknown NATS role {role!r}; roles: {', '.join(ROLES)}") from None
    return build(names, prefix)


def role_of(user: str) -> str:
    """A user's role: a role's own user, else an extra tenant (a ``client`` on its own name)."""
    return user if user in ROLES else CLIENT


def tenants(names: Iterable[str]) -> tuple[str, ...]:
    """Extra tenants as an operator lists them, checked: each a valid name (one subject token, a NATS user), none a
    role's, none twice. ``ValueError`` names the first at fault."""
    seen: list[str] = []
    for name in names:
        if not valid_tenant(name):
            raise ValueError(f"tenant {name!r}: 1-64 ASCII letters, digits, '_' or '-'")
        if name in ROLES or name in seen or name == SERVICES_ACCOUNT:
            why = "a role" if name in ROLES else "listed twice" if name in seen else "the services' account"
            raise ValueError(f"tenant {name!r}: {why}; tenants are extra users")
        seen.append(name)
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Permissions:
    """A user's complete permissions: its role's grant plus its own inbox."""

    user: str
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    max_responses: int | None
    window_s: int | None


def permissions(role: str, *, user: str | None = None, prefix: str = "") -> Permissions:
    user = user or role
    g = grant(role, prefix, tenant=user)
    return Permissions(
        user=user,
        publish=g.publish,
        subscribe=(*g.subscribe, inbox_prefix(user) + ".>"),
        max_responses=g.max_responses,
        window_s=g.window_s,
    )


_DOORS = {"client": _client_doors, "gateway": _tenant_doors}


def doors(role: str, prefix: str = "", *, tenant: str | None = None) -> tuple[Door, ...]:
    """What the account of a ``role`` user imports from the services' account (``tenant``: whose name, default the
    role's); () for a service, which lives in that account."""
    names = Names.for_prefix(prefix)
    if role in _DOORS:
        return _DOORS[role](names, prefix, tenant or role)
    if role == TRAINER:
        return _trainer_doors(names, prefix)
    grant(role, prefix)  # an unknown role is refused
    return ()


def account_of(user: str) -> str:
    """The NATS account ``user`` is in: the services' (``SERVICES_ACCOUNT``), or its own, named after it."""
    return user if user in (*_TENANT_GRANTS, TRAINER) or user not in ROLES else SERVICES_ACCOUNT


def accounts(passwords: Mapping[str, str], *, prefix: str = "") -> str:
    """The nats-server ``accounts`` block: one user per name in ``passwords`` (a role's, user name = role, or an
    extra tenant's, ``role_of``), the services in ``SERVICES_ACCOUNT`` with JetStream, exporting to each other user
    its ``doors`` only, each other user alone in its own account importing them."""
    users = [role for role in ROLES if role in passwords]
    users += tenants(sorted(set(passwords) - set(ROLES)))
    outside = {u: doors(role_of(u), prefix, tenant=u) for u in users if account_of(u) != SERVICES_ACCOUNT}
    inside = [
        _user_block(permissions(role_of(u), user=u, prefix=prefix), passwords[u])
        for u in users
        if u not in outside
    ]
    blocks = [_account(SERVICES_ACCOUNT, inside, ["    jetstream: enabled", *_exports(outside)])]
    for user, its in outside.items():
        own = ["    jetstream: enabled"] if user in JETSTREAM_TENANTS else []
        imports = [
            f"      {{{d.kind}: {{account: {json.dumps(SERVICES_ACCOUNT)}, subject: {json.dumps(d.subject)}}}}}"
            for d in its
        ]
        perms = _user_block(permissions(role_of(user), user=user, prefix=prefix), passwords[user])
        blocks.append(_account(user, [perms], [*own, "    imports = [", *imports, "    ]"]))
    return "accounts {\n" + "\n".join(blocks) + "\n}\n"


def _exports(outside: Mapping[str, tuple[Door, ...]]) -> list[str]:
    """Each door exported to exactly the accounts that import it (a subject without a tenant's name, such as the
    policy announcements, to all of them at once)."""
    to: dict[Door, list[str]] = {}
    for user, its in outside.items():
        for d in its:
            to.setdefault(d, []).append(user)
    lines = ["    exports = ["]
    for d, users in to.items():
        extra = "" if d.window_s is None else f', response_type: stream, response_threshold: "{d.window_s}s"'
        lines.append(f"      {{{d.kind}: {json.dumps(d.subject)}, accounts: {_list(users)}{extra}}}")
    return [*lines, "    ]"]


def _account(name: str, users: list[str], body: list[str]) -> str:
    return "\n".join([f"  {json.dumps(name)} {{", *body, "    users = [", *users, "    ]", "  }"])


def _user_block(perms: Permissions, password: str) -> str:
    lines = [
        "    {",
        f"      user: {json.dumps(perms.user)}",
        f"      password: {json.dumps(password)}",
        "      permissions: {",
        f"        publish: {{ allow: {_list(perms.publish)} }}",
        f"        subscribe: {{ allow: {_list(perms.subscribe)} }}",
    ]
    if perms.window_s is not None:
        most, window = perms.max_responses, perms.window_s
        lines.append(f'        allow_responses: {{ max: {most}, expires: "{window}s" }}')
    return "\n".join([*lines, "      }", "    }"])


def _list(subjects: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(s) for s in subjects) + "]"


CHART_BLOCKS: Mapping[str, str] = {
    "planner": "planner",
    "executor": "executor",
    "workerAdapter": "worker-adapter",
    "verifier": "verifier",
    "gateway": "gateway",
    "learner": "learner",
}
"""charts/conductor/values.yaml service block -> role; the client is ``auth.users.client``."""


def chart_values() -> dict[str, dict[str, object]]:
    """The ``nats`` block each chart service should carry (user, publish, subscribe, responses); under
    ``auth.users.client`` and ``auth.users.trainer``, those users' lists; under ``auth.tenant``, every extra tenant's
    (``auth.tenants``), ``{tenant}`` standing for its name: what tests/deploy compares values.yaml with. The chart
    appends each user's inbox prefix itself (``_INBOX.<user>.>``), since the user name is a value. A user with
    ``doors`` is alone in its own account, importing them from the services' (``accounts``); ``jetstream`` gives
    that account JetStream of its own."""
    out: dict[str, dict[str, object]] = {}
    users = [(f"auth.users.{role}", role) for role in (CLIENT, TRAINER)]
    for block, role in [*CHART_BLOCKS.items(), *users]:
        g = grant(role)
        entry: dict[str, object] = {"publish": list(g.publish), "subscribe": list(g.subscribe)}
        if not block.startswith("auth.users."):
            entry = {"user": role, **entry}
        if g.window_s is not None:
            entry["responses"] = {"max": g.max_responses, "expires": f"{g.window_s}s"}
        if its := doors(role):
            entry["doors"] = [_chart_door(d) for d in its]
        if role in JETSTREAM_TENANTS:
            entry["jetstream"] = True
        out[block] = entry
    g = grant(CLIENT, tenant=TENANT_PLACEHOLDER)
    its = doors(CLIENT, tenant=TENANT_PLACEHOLDER)
    out["auth.tenant"] = {
        "publish": list(g.publish),
        "subscribe": list(g.subscribe),
        "doors": [_chart_door(d) for d in its],
    }
    return out


def _chart_door(door: Door) -> dict[str, str]:
    """A door as the chart's values hold it: ``{service|stream: subject}``, ``window`` for a multi-message answer."""
    out = {door.kind: door.subject}
    if door.window_s is not None:
        out["window"] = f"{door.window_s}s"
    return out
