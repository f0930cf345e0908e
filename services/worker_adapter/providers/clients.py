"""SDK clients shared by the HTTP providers: one per (base URL, key variable), created on first use, closed once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

from conductor.pool import WorkerSpec
from schemas.work import FaultReason
from services.worker_adapter.config import key_env
from services.worker_adapter.provider import PermanentProviderError


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientCache(Generic[C]):
    """``keyless`` is the key sent when the worker names no key variable (a local server); None means a key is
    required. ``make(api_key, spec)`` builds the SDK client."""

    def __init__(self, keys: Mapping[str, str], make: Callable[[str, WorkerSpec], C], *, keyless: str | None) -> None:
        self._keys = keys
        self._make = make
        self._keyless = keyless
        self._clients: dict[tuple[str | None, str | None], C] = {}

    def get(self, spec: WorkerSpec) -> C:
        env = key_env(spec)
        key = self._keys.get(env) if env else self._keyless
        if key is None:
            raise PermanentProviderError(
                f"worker {spec.name!r}: environment variable {env} is not set", reason=FaultReason.CONFIG
            )
        slot = (spec.base_url, env)
        if slot not in self._clients:
            self._clients[slot] = self._make(key, spec)
        return self._clients[slot]

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()
