"""What the HTTP providers share: SDK clients (one per base URL and key variable, created on first use, closed
once) and the translation of the SDKs' transport errors into our two typed errors.

The openai and anthropic SDKs are generated from the same template: both raise ``APITimeoutError``,
``APIConnectionError`` and ``APIStatusError`` (with ``status_code``, ``message``, ``response`` and ``body``), so
``sdk_errors`` maps them once; each provider still handles what is specific to its SDK after it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Generic, Protocol, TypeVar

from conductor.pool import WorkerSpec
from schemas.work import FaultReason
from services.worker_adapter.config import key_env
from services.worker_adapter.provider import PermanentProviderError, TransientProviderError, classify_status


class _Closable(Protocol):
    async def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


class ClientCache(Generic[C]):
    """``keyless`` is the key sent when the worker names no key variable (a local server); None means a key is
    required. ``make(api_key, spec)`` builds the SDK client."""

    def __init__(
        self, keys: Mapping[str, str], make: Callable[[str, WorkerSpec], C], *, keyless: str | None
    ) -> None:
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


@contextlib.contextmanager
def sdk_errors(sdk: ModuleType, timeout_s: float) -> Iterator[None]:
    """Timeouts and connection failures are transient; HTTP statuses are classified by ``classify_status``."""
    try:
        yield
    except sdk.APITimeoutError as exc:
        raise TransientProviderError(
            f"timed out after {timeout_s:g} s", reason=FaultReason.TIMEOUT, detail="timeout"
        ) from exc
    except sdk.APIConnectionError as exc:
        raise TransientProviderError(
            f"connection failed: {exc.message}", reason=FaultReason.CONNECTION, detail=repr(exc.__cause__)
        ) from exc
    except sdk.APIStatusError as exc:
        raise classify_status(
            exc.status_code, exc.message, headers=exc.response.headers, body=str(exc.body)
        ) from exc
