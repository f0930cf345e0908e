"""A small client for the public solve API: plain nats-py, JSON in and out, live progress events; and the learner's
side of the rollout API (``rollout``, ``rollout_all``).

Any NATS client in any language can do the same as tenant ``T`` (the NATS user it connects as, docs/tenancy.md):
send a JSON ``SolveRequest`` to ``conductor.solve.T`` and read the JSON ``SolveResult`` reply; subscribe to
``conductor.progress.T.<task_id>`` first to watch the steps; read a durable task's stored result with a direct get
of ``$KV.CONDUCTOR_RESULTS.T.<task_id>`` (``$JS.API.DIRECT.GET.KV_CONDUCTOR_RESULTS.$KV.CONDUCTOR_RESULTS.T.<task_id>``,
the only read of the bucket a tenant may make).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence

import msgspec
import nats
import nats.errors
import nats.js.errors as js_errors

from conductor import stored, tracing
from conductor.access import CLIENT
from conductor.credentials import Connection, connection, refusal, user_of
from conductor.endpoints import Requester
from conductor.liveness import CallPolicy, request_headers
from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.errors import ErrorCode, ErrorInfo
from schemas.rollout import (
    MAX_ROLLOUTS_PER_BATCH,
    ROLLOUT,
    Rollout,
    RolloutBatch,
    RolloutBatchResult,
    RolloutResult,
)
from schemas.solve import (
    SOLVE,
    SOLVE_SUBJECT,
    ProgressEvent,
    SolveRequest,
    SolveResult,
    progress_subject,
    solve_subject,
)
from schemas.tasks import Names, task_key

_result_dec = msgspec.json.Decoder(SOLVE.reply)
RESULTS_STORE = "results"  # ``conductor_store_entries_refused`` label
_event_dec = msgspec.json.Decoder(ProgressEvent)


class SolveTimeoutError(TimeoutError):
    """No result within the client's timeout (the task may still finish server-side)."""


class ResultNotReadyError(LookupError):
    """No stored result for the task (yet)."""


class DuplicateTaskError(ValueError):
    """A durable submission JetStream dropped: its id was submitted before, within the duplicate window."""


class NatsUnreachableError(ConnectionError):
    """No NATS server answered within the connect timeout (or it refused the credentials)."""


class NoExecutorError(LookupError):
    """NATS answered, but nothing serves the solve subject (no executor is running)."""


CONNECT_TIMEOUT_S = 5.0
"""How long a client tries to reach NATS before it says so (one line, not a retry loop of tracebacks)."""

FULL_STORE_CODES = frozenset({10023, 10028, 10047})
"""JetStream's "insufficient resources" (the server's or account's store limit), "insufficient memory resources"
and "insufficient storage resources": nothing more can be written until something is deleted."""


def store_full(exc: js_errors.APIError) -> bool:
    """A JetStream write refused for lack of room: the store's limits, or the stream's own (``maximum bytes``)."""
    return exc.err_code in FULL_STORE_CODES or "maximum bytes" in (exc.description or "")


def refused(conn: Connection, reason: str) -> NatsUnreachableError:
    return NatsUnreachableError(
        f"NATS at {conn.shown} refused the credentials of user {conn.user!r} ({reason})"
    )


async def connect(conn: Connection, *, name: str, timeout: float = CONNECT_TIMEOUT_S) -> nats.NATS:
    """A connection within ``timeout``, else ``NatsUnreachableError`` in one line: why the last attempt failed, or
    at once when the server refuses the credentials (retrying cannot help)."""
    errors: list[BaseException] = []
    denied = asyncio.Event()

    async def quiet(exc: Exception) -> None:  # nats-py's default prints a traceback per attempt
        errors.append(exc)
        if refusal(exc) is not None:
            denied.set()

    connecting = asyncio.ensure_future(
        nats.connect(
            conn.url,
            name=name,
            inbox_prefix=conn.inbox_prefix,
            connect_timeout=2,
            error_cb=quiet,
            max_reconnect_attempts=-1,
        )
    )
    refusing = asyncio.ensure_future(denied.wait())
    await asyncio.wait({connecting, refusing}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    refusing.cancel()
    if connecting.done() and connecting.exception() is None:
        return connecting.result()
    connecting.cancel()
    if (reason := next(filter(None, map(refusal, errors)), None)) is not None:
        raise refused(conn, reason)
    last = errors[-1] if errors else connecting.exception() if connecting.done() else None
    why = f"{type(last).__name__}: {last}" if last is not None else "no answer"
    raise NatsUnreachableError(f"cannot reach NATS at {conn.shown} within {timeout:g}s ({why})")


class ConductorClient:
    """``async with ConductorClient(settings)`` connects and drains its own connection, as the NATS user ``role``
    (``CONDUCTOR_NATS_USER``, else ``client``; the learner passes ``learner``) unless ``NATS_URL`` names one
    (conductor/credentials.py); with ``nc`` (a process that already holds a connection, e.g. the gateway) it borrows
    that one and never closes it. That user is the ``tenant`` whose subjects and results it uses."""

    def __init__(
        self, settings: CommonSettings, *, nc: nats.NATS | None = None, role: str | None = None
    ) -> None:
        self.settings = settings
        self._nc = nc
        self._owned = nc is None
        self._role = role or settings.nats_user or CLIENT
        self.tenant = user_of(settings, self._role)
        self._requester: Requester | None = None

    async def __aenter__(self) -> ConductorClient:
        if self._owned:  # CredentialsError: the credentials file is missing, unreadable or lacks the user
            self._nc = await connect(connection(self.settings, self._role), name=f"conductor-{self._role}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._owned and self._nc is not None:
            await self._nc.drain()

    async def solve(
        self,
        req: SolveRequest,
        *,
        timeout: float = 600.0,
        on_progress: Callable[[ProgressEvent], None] | None = None,
    ) -> SolveResult:
        assert self._nc is not None, "use `async with ConductorClient(...)`"
        if req.task_id is None:
            req = msgspec.structs.replace(req, task_id=uuid.uuid4().hex)
        sub = None
        if on_progress is not None:
            callback = on_progress

            async def _on_event(msg: nats.aio.msg.Msg) -> None:
                callback(_event_dec.decode(msg.data))

            progress = progress_subject(self.tenant, req.task_id or "")
            sub = await self._nc.subscribe(self.settings.subject(progress), cb=_on_event)
        subject = self.settings.subject(solve_subject(self.tenant))
        try:
            # The deadline travels with the solve (conductor/liveness.py): once this client stops waiting, the
            # executor starts no further paid calls for it.
            headers = tracing.headers(request_headers(None, time.time() + timeout))
            reply = await self._nc.request(subject, encode(req), timeout=timeout, headers=headers)
        except nats.errors.NoRespondersError as exc:
            raise NoExecutorError(
                f"nothing serves {self.settings.subject(SOLVE_SUBJECT)} (no executor is running: "
                "`conductor serve all`)"
            ) from exc
        except nats.errors.TimeoutError as exc:
            raise SolveTimeoutError(f"no result for task {req.task_id} within {timeout}s") from exc
        finally:
            if sub is not None:
                await sub.unsubscribe()
        return _result_dec.decode(reply.data)

    async def rollout(
        self, batch: RolloutBatch, *, timeout: float = 600.0, policy: CallPolicy | None = None
    ) -> RolloutBatchResult:
        """Score a batch on one executor replica (``conductor.rollout``, queue group ``executor``). Never raises for
        an executor that does not answer: the reply is then the typed, retryable ``unavailable`` error. Liveness
        beats notice a replica that dies mid-batch within seconds and send the batch again (rollouts are not
        durable, so its work is redone); the deadline travels with the batch, so one abandoned here stops there."""
        assert self._nc is not None, "use `async with ConductorClient(...)`"
        if self._requester is None:
            self._requester = Requester(self._nc)
        prefix = self.settings.subject_prefix
        return await self._requester.call(
            ROLLOUT, batch, prefix=prefix, timeout=timeout, policy=policy or CallPolicy()
        )

    async def rollout_all(
        self, rollouts: Sequence[Rollout], *, batch_size: int = 8, timeout: float = 600.0
    ) -> list[RolloutResult]:
        """Score many rollouts (a GRPO group, or a step's worth) as batches of ``batch_size`` sent at once, so they
        fan out over the executor replicas (the queue group hands each batch to one); results in the given order.
        A batch answered with an error gives each of its rollouts that error and no reward (masked in training)."""
        size = max(1, min(batch_size, MAX_ROLLOUTS_PER_BATCH))
        chunks = [list(rollouts[i : i + size]) for i in range(0, len(rollouts), size)]
        replies = await asyncio.gather(
            *(self.rollout(RolloutBatch(rollouts=c), timeout=timeout) for c in chunks)
        )
        return [
            result for chunk, reply in zip(chunks, replies, strict=True) for result in _results(chunk, reply)
        ]

    async def submit(self, req: SolveRequest) -> str:
        """Durable intake: publish to the tenant's subject of the JetStream task queue, deduplicated by
        ``<tenant>.<task_id>`` (two tenants' equal ids are two tasks). Returns the task id; ``DuplicateTaskError``
        when JetStream dropped the submission as a duplicate (that id was submitted before, by this client or one
        that learnt it first: docs/tenancy.md)."""
        assert self._nc is not None, "use `async with ConductorClient(...)`"
        task_id = req.task_id or uuid.uuid4().hex
        req = msgspec.structs.replace(req, task_id=task_id)
        names = Names.for_prefix(self.settings.subject_prefix)
        js = self._nc.jetstream()
        headers = tracing.headers({"Nats-Msg-Id": task_key(self.tenant, task_id)})
        ack = await js.publish(
            names.submit(self.tenant), encode(req), stream=names.tasks_stream, headers=headers
        )
        if ack.duplicate:
            raise DuplicateTaskError(
                f"task {task_id} was already submitted by tenant {self.tenant} (JetStream's duplicate window): this "
                "submission was dropped and the earlier one stands; a new task needs a new id"
            )
        return task_id

    async def result(self, task_id: str, *, wait: float = 0.0, key: str | None = None) -> SolveResult:
        """The stored result of this tenant's durable task; with ``wait`` > 0, poll for it up to that many seconds.
        Read with a direct get naming the key (conductor/access.py: a tenant may read no other way), so a task id
        is looked up under this tenant's name only. An entry there that does not decode, or that is not the
        executor's result for this tenant's task (and the gateway's ``key``), is not a result (conductor/stored.py)."""
        assert self._nc is not None, "use `async with ConductorClient(...)`"
        names = Names.for_prefix(self.settings.subject_prefix)
        deadline = asyncio.get_running_loop().time() + wait
        seen: bytes | None = (
            None  # the last entry found that is not the task's result (refused once, not per poll)
        )
        while True:
            data = await self._stored(names, task_id)
            if data is not None and data != seen:
                found = stored.result(data, RESULTS_STORE, self.tenant, task_id, key)
                if found is not None:
                    return found
                seen = data
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                ignored = (
                    "" if seen is None else " (the entry stored under its name is not its result: ignored)"
                )
                raise ResultNotReadyError(f"no result for task {task_id} yet{ignored}")
            await asyncio.sleep(min(0.05, remaining))

    async def _stored(self, names: Names, task_id: str) -> bytes | None:
        """The stored result's bytes, None while there is none. A wildcard in ``task_id`` matches no key: the
        message found must be the key's own."""
        assert self._nc is not None
        bucket = names.results_bucket
        subject = f"$KV.{bucket}.{task_key(self.tenant, task_id)}"
        js = self._nc.jetstream()
        try:
            msg = await js.get_last_msg(f"KV_{bucket}", subject, direct=True)
        except js_errors.NotFoundError:
            return None
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            # No stream answers the read (a server without JetStream says so; one with it lets it time out).
            raise ResultNotReadyError(
                f"no results bucket {bucket} serving direct reads: no executor of schema 9 or "
                "later has run yet"
            ) from exc
        deleted = (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE")
        return msg.data if msg.subject == subject and msg.data and not deleted else None


def _results(chunk: list[Rollout], reply: RolloutBatchResult) -> list[RolloutResult]:
    """One result per rollout sent: the batch's own, or its error on each (ids and versions kept)."""
    if reply.error is None and len(reply.results) == len(chunk):
        return list(reply.results)
    error = reply.error or ErrorInfo(
        code=ErrorCode.INTERNAL, message=f"{len(reply.results)} results for a batch of {len(chunk)}"
    )
    return [RolloutResult(id=r.id, error=error, policy_version=r.policy_version) for r in chunk]
