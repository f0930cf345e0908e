"""What a subject is, declared once: for request/reply its subject, queue group, request and reply types and
description (``RequestReply``); for a published event its address, payload type and description (``Event``).

Each subject family's module declares its ``RequestReply`` beside its payloads (``schemas.solve.SOLVE``,
``schemas.plan.PLAN``, ...) and ``schemas.catalog`` lists them. Everything else is derived from the declaration:
the serving side (``conductor.endpoints.serve``: decode, reject, count, encode), the requesting side
(``conductor.endpoints.Requester.call``: encode, request, decode, typed ``unavailable``), and the AsyncAPI
document (channels, queue bindings, payload and reply schemas, descriptions).

Every reply type carries an ``error: ErrorInfo | None``; ``failed`` builds the reply that reports one, so a bad
request, a handler bug or a responder that never answered all reach the requester as the same typed reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from schemas.errors import ErrorInfo

Req = TypeVar("Req")
Rep = TypeVar("Rep")
P = TypeVar("P")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestReply(Generic[Req, Rep]):
    """One request/reply subject. ``subject`` is unprefixed (deployments and tests prepend their prefix) and may
    hold ``{name}`` parameters, one subject token each, described in ``parameters`` (the solve subject names its
    tenant); a responder subscribes to ``wildcard(subject)``. ``queue`` is the queue group replicas share, named
    after the serving service; ``title`` names the channel in the AsyncAPI document; ``error_reply`` builds the
    reply carrying an error, given the request when it decoded (a worker call's error reply names the worker it
    was for)."""

    subject: str
    queue: str
    title: str
    request: type[Req]
    reply: type[Rep]
    description: str
    error_reply: Callable[[ErrorInfo, Req | None], Rep]
    parameters: Mapping[str, str] = field(default_factory=dict)

    def failed(self, info: ErrorInfo, request: Req | None = None) -> Rep:
        """The typed reply reporting ``info``."""
        return self.error_reply(info, request)


def wildcard(subject: str) -> str:
    """The NATS subscription matching every concrete subject of ``subject``: each ``{name}`` token becomes ``*``."""
    return ".".join("*" if t.startswith("{") and t.endswith("}") else t for t in subject.split("."))


@dataclass(frozen=True, slots=True, kw_only=True)
class Event(Generic[P]):
    """A subject a service publishes to, with no reply. ``address`` may hold ``{name}`` parameters (one subject
    token each, described in ``parameters``); ``subject(...)`` fills them. Listed in ``schemas.catalog.EVENTS``,
    from which the AsyncAPI document gets the channel, its parameters and the payload schema."""

    title: str
    address: str
    payload: type[P]
    description: str
    parameters: Mapping[str, str]

    def subject(self, **values: str) -> str:
        """The concrete (unprefixed) subject, e.g. ``PROGRESS.subject(task_id="t-1")``."""
        return self.address.format(**values)
