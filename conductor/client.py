"""A small client for the public solve API: plain nats-py, JSON in and out, live progress events.

Any NATS client in any language can do the same: send a JSON ``SolveRequest`` to ``conductor.solve`` and read the
JSON ``SolveResult`` reply; subscribe to ``conductor.progress.<task_id>`` first to watch the steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import msgspec
import nats
import nats.errors

from conductor.settings import CommonSettings
from conductor.wire import encode
from schemas.solve import SOLVE_SUBJECT, ProgressEvent, SolveRequest, SolveResult, progress_subject

_result_dec = msgspec.json.Decoder(SolveResult)
_event_dec = msgspec.json.Decoder(ProgressEvent)


class SolveTimeoutError(TimeoutError):
    """No result within the client's timeout (the task may still finish server-side)."""


class ConductorClient:
    def __init__(self, settings: CommonSettings) -> None:
        self.settings = settings
        self._nc: nats.NATS | None = None

    async def __aenter__(self) -> ConductorClient:
        self._nc = await nats.connect(self.settings.nats_url, name="conductor-client")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
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

            sub = await self._nc.subscribe(self.settings.subject(progress_subject(req.task_id or "")), cb=_on_event)
        try:
            reply = await self._nc.request(self.settings.subject(SOLVE_SUBJECT), encode(req), timeout=timeout)
        except nats.errors.TimeoutError as exc:
            raise SolveTimeoutError(f"no result for task {req.task_id} within {timeout}s") from exc
        finally:
            if sub is not None:
                await sub.unsubscribe()
        return _result_dec.decode(reply.data)
