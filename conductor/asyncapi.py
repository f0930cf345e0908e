"""The AsyncAPI 3 document of Conductor's NATS API.

FastStream generates the document (servers, channels, operations, queue-group bindings) from the real service
routers. Its payload generator only understands pydantic models, and our handlers take raw bytes so bad input can
be answered with a typed error; so the payload and reply schemas are filled in here from the msgspec Structs in
``schemas/`` — the contract itself, not a copy of it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from faststream.specification import AsyncAPI

from conductor import __version__
from conductor.broker import make_broker
from conductor.runtime import SERVICES, create_services
from conductor.service import full_router
from conductor.settings import CommonSettings
from schemas import SCHEMA_VERSION
from schemas.plan import PlanReply, PlanRequest
from schemas.solve import ProgressEvent, SolveRequest, SolveResult
from schemas.verify import VerifyBatch, VerifyBatchResult
from schemas.work import WorkReply, WorkRequest

# channel title (the subscriber's ``title=``) -> (request, reply)
REQUEST_REPLY: dict[str, tuple[type, type]] = {
    "solve": (SolveRequest, SolveResult),
    "plan": (PlanRequest, PlanReply),
    "work": (WorkRequest, WorkReply),
    "verify": (VerifyBatch, VerifyBatchResult),
}

DESCRIPTION = f"""Conductor: a learned orchestrator of worker LLMs (arXiv 2512.04388) as NATS services.
Clients use `conductor.solve` (request/reply, JSON); progress events arrive on `conductor.progress.<task_id>`.
The other channels are internal between services. Schema version {SCHEMA_VERSION}; evolution rules in schemas/__init__.py."""


def _ref_name(name: str) -> str:
    return name.replace("#/$defs/", "#/components/schemas/")


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (_ref_name(v) if k == "$ref" and isinstance(v, str) else _rewrite_refs(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node


def asyncapi_document() -> dict[str, Any]:
    settings = CommonSettings()
    broker = make_broker(settings, name="asyncapi")
    for svc in create_services(list(SERVICES), {}):
        broker.include_router(full_router(svc))
    doc: dict[str, Any] = AsyncAPI(
        broker, title="Conductor", version=__version__, description=DESCRIPTION
    ).to_specification().to_jsonable()

    types = [t for pair in REQUEST_REPLY.values() for t in pair] + [ProgressEvent]  # SolveRequest/Result inside
    (refs, components) = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schemas_ = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas_.pop("EmptyPayload", None)
    schemas_.update(_rewrite_refs(components))
    by_type = dict(zip(types, refs, strict=True))
    messages = doc["components"].setdefault("messages", {})

    for title, (request, reply) in REQUEST_REPLY.items():
        channel = doc["channels"].get(title)
        if channel is None:
            continue
        for ref in channel["messages"].values():
            key = ref["$ref"].rsplit("/", 1)[-1]
            messages[key]["payload"] = by_type[request]
        reply_key = f"{title}:ReplyMessage"
        messages[reply_key] = {"title": reply_key, "payload": by_type[reply]}
        channel["messages"]["ReplyMessage"] = {"$ref": f"#/components/messages/{reply_key}"}
        doc["operations"][title]["reply"] = {
            "messages": [{"$ref": f"#/channels/{title}/messages/ReplyMessage"}],
        }

    tasks = doc["channels"].get("tasks")
    if tasks is not None:  # the durable intake: a SolveRequest per message, no reply (results below)
        for ref in tasks["messages"].values():
            messages[ref["$ref"].rsplit("/", 1)[-1]]["payload"] = by_type[SolveRequest]
    messages["results:Message"] = {"title": "results:Message", "payload": by_type[SolveResult]}
    doc["channels"]["results"] = {
        "address": "conductor.results.{task_id}",
        "description": "The final result of a durable task, once per task (JetStream stream CONDUCTOR_RESULT_EVENTS, "
        "deduplicated by task id); also stored in the KV bucket CONDUCTOR_RESULTS under the task id.",
        "parameters": {"task_id": {"description": "The task's id."}},
        "messages": {"Message": {"$ref": "#/components/messages/results:Message"}},
    }
    doc["operations"]["results"] = {
        "action": "send",
        "channel": {"$ref": "#/channels/results"},
        "messages": [{"$ref": "#/channels/results/messages/Message"}],
    }
    messages["progress:Message"] = {"title": "progress:Message", "payload": by_type[ProgressEvent]}
    doc["channels"]["progress"] = {
        "address": "conductor.progress.{task_id}",
        "description": "One event per planned round and finished step, then `done`. Best effort (core NATS).",
        "parameters": {"task_id": {"description": "The task's id (SolveRequest.task_id or generated)."}},
        "messages": {"Message": {"$ref": "#/components/messages/progress:Message"}},
    }
    doc["operations"]["progress"] = {
        "action": "send",
        "channel": {"$ref": "#/channels/progress"},
        "messages": [{"$ref": "#/channels/progress/messages/Message"}],
    }
    return doc
