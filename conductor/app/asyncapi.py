"""The AsyncAPI 3 document of Conductor's NATS API.

FastStream generates the document (servers, channels, operations, queue-group bindings, channel descriptions) from
the real service routers, whose request/reply endpoints are built from the contracts in ``schemas.catalog``. Its
payload generator only understands pydantic models, and our endpoints take raw bytes so bad input can be answered
with a typed error; so each channel's payload and reply schemas are filled in here from its contract's msgspec
request and reply types — the contract itself, not a copy of it.
"""

from __future__ import annotations

from typing import Any

import msgspec
from faststream.specification import AsyncAPI

from conductor import __version__
from conductor.app.runtime import create_services, service_names
from conductor.broker import make_broker
from conductor.service import full_router
from conductor.settings import CommonSettings
from schemas import SCHEMA_VERSION
from schemas.catalog import EVENTS, REQUEST_REPLY
from schemas.contract import Event
from schemas.solve import SolveRequest
from schemas.tasks import SUBMIT_SUBJECT

DESCRIPTION = f"""Conductor: a learned orchestrator of worker LLMs (arXiv 2512.04388) as NATS services.
A tenant (the NATS user a client connects as) uses `conductor.solve.<tenant>` (request/reply, JSON); progress events
arrive on `conductor.progress.<tenant>.<task_id>`; each tenant may use only its own subjects (docs/tenancy.md).
The other channels are internal between services. Schema version {SCHEMA_VERSION}; evolution rules in schemas/__init__.py."""


def _ref_name(name: str) -> str:
    return name.replace("#/$defs/", "#/components/schemas/")


def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (_ref_name(v) if k == "$ref" and isinstance(v, str) else _rewrite_refs(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node


def asyncapi_document() -> dict[str, Any]:
    settings = CommonSettings()
    broker = make_broker(settings, name="asyncapi")
    for svc in create_services(service_names("all"), {}):  # the gateway speaks HTTP, not NATS
        broker.include_router(full_router(svc))
    doc: dict[str, Any] = (
        AsyncAPI(broker, title="Conductor", version=__version__, description=DESCRIPTION)
        .to_specification()
        .to_jsonable()
    )

    types = [
        *dict.fromkeys(
            [*(t for c in REQUEST_REPLY for t in (c.request, c.reply)), *(e.payload for e in EVENTS)]
        )
    ]
    (refs, components) = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    schemas_ = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas_.pop("EmptyPayload", None)
    schemas_.update(_rewrite_refs(components))
    by_type = dict(zip(types, refs, strict=True))
    messages = doc["components"].setdefault("messages", {})

    for contract in REQUEST_REPLY:
        title = contract.title
        channel = doc["channels"].get(title)
        if channel is None:
            continue
        for ref in channel["messages"].values():
            key = ref["$ref"].rsplit("/", 1)[-1]
            messages[key]["payload"] = by_type[contract.request]
        reply_key = f"{title}:ReplyMessage"
        messages[reply_key] = {"title": reply_key, "payload": by_type[contract.reply]}
        channel["messages"]["ReplyMessage"] = {"$ref": f"#/components/messages/{reply_key}"}
        doc["operations"][title]["reply"] = {
            "messages": [{"$ref": f"#/channels/{title}/messages/ReplyMessage"}],
        }
        if contract.parameters:
            channel["parameters"] = {
                name: {"description": text} for name, text in contract.parameters.items()
            }

    tasks = doc["channels"].get("tasks")
    if tasks is not None:  # the durable intake: a SolveRequest per message, no reply (results below)
        for ref in tasks["messages"].values():
            messages[ref["$ref"].rsplit("/", 1)[-1]]["payload"] = by_type[SolveRequest]
        tasks["address"] = tasks["bindings"]["nats"]["subject"] = SUBMIT_SUBJECT + ".{tenant}"
        tasks["parameters"] = {
            "tenant": {
                "description": "The NATS user submitting the task: only that user may "
                "publish here (conductor/access.py)."
            }
        }
    for event in EVENTS:
        _add_event(doc, event, by_type[event.payload])
    return doc


def _add_event(doc: dict[str, Any], event: Event, payload: dict[str, Any]) -> None:
    """A published subject (no reply, no FastStream subscriber to generate it from): channel, message, operation."""
    key = f"{event.title}:Message"
    doc["components"]["messages"][key] = {"title": key, "payload": payload}
    doc["channels"][event.title] = {
        "address": event.address,
        "description": event.description,
        "parameters": {name: {"description": text} for name, text in event.parameters.items()},
        "messages": {"Message": {"$ref": f"#/components/messages/{key}"}},
    }
    doc["operations"][event.title] = {
        "action": "send",
        "channel": {"$ref": f"#/channels/{event.title}"},
        "messages": [{"$ref": f"#/channels/{event.title}/messages/Message"}],
    }
