"""`conductor status`: each service's workloads, replicas and ready pods from Kubernetes, and the durable intake's
lag from JetStream (the same numbers KEDA scales the executor on)."""

from __future__ import annotations

import msgspec
import nats
import nats.js.errors
from rich.table import Table

from conductor.access import CLIENT
from conductor.credentials import CredentialsError, connection, redacted
from conductor.kube import WorkloadState
from conductor.settings import CommonSettings
from schemas.tasks import INTAKE_CONSUMER, Names


class IntakeLag(msgspec.Struct, frozen=True, kw_only=True):
    """Tasks waiting for an executor (``pending``), being worked on (``in_flight``), redelivered so far."""

    stream: str
    pending: int
    in_flight: int
    redelivered: int


class Status(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    release: str
    workloads: list[WorkloadState]
    intake: IntakeLag | None = None
    intake_error: str | None = None


async def intake_lag(nc: nats.NATS, prefix: str = "") -> IntakeLag:
    """Lag of the executor's durable consumer. Raises LookupError when no executor has created it yet."""
    names = Names.for_prefix(prefix)
    try:
        info = await nc.jetstream().consumer_info(names.tasks_stream, INTAKE_CONSUMER)
    except nats.js.errors.NotFoundError as exc:
        raise LookupError(
            f"no consumer {INTAKE_CONSUMER!r} on stream {names.tasks_stream}: no executor ran"
        ) from exc
    return IntakeLag(
        stream=names.tasks_stream,
        pending=int(info.num_pending or 0),
        in_flight=int(info.num_ack_pending or 0),
        redelivered=int(info.num_redelivered or 0),
    )


async def read_lag(settings: CommonSettings) -> tuple[IntakeLag | None, str | None]:
    """(lag, None), or (None, why not): status still reports the cluster when NATS is out of reach."""
    try:
        conn = connection(settings, CLIENT)
        nc = await nats.connect(
            conn.url, inbox_prefix=conn.inbox_prefix, connect_timeout=3, max_reconnect_attempts=0
        )
    except (OSError, nats.errors.Error, CredentialsError) as exc:
        return None, f"NATS at {redacted(settings.nats_url)}: {exc!r}"
    try:
        return await intake_lag(nc, settings.subject_prefix), None
    except (LookupError, nats.errors.Error) as exc:
        return None, str(exc)
    finally:
        await nc.close()


def table(status: Status) -> Table:
    t = Table(title=f"conductor release {status.release!r} in {status.namespace!r}")
    for col in ("service", "workload", "ready", "updated", "pods (phase, restarts)"):
        t.add_column(col)
    for w in status.workloads:
        pods = (
            ", ".join(
                f"{p.name.rsplit('-', 1)[-1]} {p.phase}{'' if p.ready else ' not-ready'} r{p.restarts}"
                for p in w.pods
            )
            or "-"
        )
        style = None if w.healthy else "red"
        t.add_row(
            w.component, f"{w.kind}/{w.name}", f"{w.ready}/{w.desired}", str(w.updated), pods, style=style
        )
    if status.intake is not None:
        lag = status.intake
        t.caption = f"intake {lag.stream}: {lag.pending} pending, {lag.in_flight} in flight, {lag.redelivered} redelivered"
    elif status.intake_error:
        t.caption = f"intake lag unavailable: {status.intake_error}"
    return t
