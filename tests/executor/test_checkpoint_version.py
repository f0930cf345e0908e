"""The store stamps every checkpoint it saves with the current format version."""

from __future__ import annotations

import msgspec

from schemas.solve import SolveRequest
from schemas.tasks import CHECKPOINT_VERSION, Names, TaskCheckpoint
from services.executor.config import StoreSettings
from services.executor.store import TaskStore


class _KV:
    def __init__(self) -> None:
        self.stored: dict[str, bytes] = {}

    async def put(self, key: str, value: bytes) -> int:
        self.stored[key] = value
        return 1


async def test_a_resumed_old_checkpoint_is_saved_with_the_current_version() -> None:
    store = TaskStore(None, Names.for_prefix(""), StoreSettings())  # type: ignore[arg-type]
    kv = store._checkpoints = _KV()  # type: ignore[assignment]
    old = TaskCheckpoint(task_id="t-1", request=SolveRequest(question="q"), schema_version=2)
    await store.save_checkpoint("client.t-1", old)
    saved = msgspec.json.decode(kv.stored["client.t-1"], type=TaskCheckpoint)
    assert saved.schema_version == CHECKPOINT_VERSION == 14
    assert msgspec.structs.replace(saved, schema_version=2) == old
