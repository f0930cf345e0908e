"""Shared planner fixtures: the demo pool's Conductor view; a local Chat Completions server."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from conductor.pool import load_pool
from schemas.plan import WorkerCard
from tests.planner.test_openai_endpoint import FakeEndpoint


@pytest.fixture
def cards() -> list[WorkerCard]:
    pool = load_pool(None)
    return pool.cards(pool.workers)


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    ep = FakeEndpoint()
    thread = threading.Thread(target=ep.server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()
