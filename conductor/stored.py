"""What a store holds is data, not truth (issue 34): the one place a stored entry is decoded and checked.

nats-server stores whatever a client aims at a subject as a reply (a PubAck, an API error, a direct get's answer:
another tenant's result), and a subject permission sees only the subject a client publishes on, never the reply it
names. So a reader treats an entry that does not decode, or that is not the one the writer made for that name (a
result naming another tenant, key or task), as absent: logged, counted in ``conductor_store_entries_refused``, and
replaced by compare-and-set where the reader owns the store.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec
import structlog

from conductor import metrics
from schemas.solve import SolveResult, belongs

log = structlog.get_logger("conductor.stored")
T = TypeVar("T")
_result_dec = msgspec.json.Decoder(SolveResult)

UNDECODABLE = "undecodable"
FOREIGN = "foreign"


def refused(store: str, name: str, reason: str, **context: object) -> None:
    """An entry read as absent: logged (one line) and counted."""
    log.warning("stored entry ignored", store=store, name=name[:200], reason=reason, **context)
    metrics.store_entry_refused(store, reason)


def record(data: bytes, decoder: msgspec.json.Decoder[T], store: str, name: str) -> T | None:
    """``data`` decoded, or None (refused) when it does not decode as the record. Records that must not read a
    foreign JSON object as "all defaults" forbid unknown fields (the gateway's and the worker-adapter's limits)."""
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        refused(store, name, UNDECODABLE, error=str(exc)[:200])
        return None


def result(
    data: bytes | None, store: str, tenant: str, task_id: str, key: str | None = None
) -> SolveResult | None:
    """The result stored for ``tenant``'s ``task_id`` (and the gateway's ``key``) if the executor wrote it for that
    task; else None (refused). Only the executor writes ``SolveResult.tenant`` (schemas/solve.py ``belongs``)."""
    if not data:
        return None
    found = record(data, _result_dec, store, f"{tenant}.{task_id}")
    if found is None:
        return None
    if not belongs(found, tenant, task_id, key):
        refused(
            store,
            f"{tenant}.{task_id}",
            FOREIGN,
            tenant_found=found.tenant,
            key_found=found.key,
            task_id_found=found.task_id[:200],
        )
        return None
    return found
