"""Shared planner fixture: the demo pool's Conductor view."""

from __future__ import annotations

import pytest

from conductor.pool import load_pool
from schemas.plan import WorkerCard


@pytest.fixture
def cards() -> list[WorkerCard]:
    pool = load_pool(None)
    return pool.cards(pool.workers)
