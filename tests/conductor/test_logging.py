"""``conductor.logging.bound_contextvars``: the same context as structlog's own context manager, restored on exit."""

from __future__ import annotations

import asyncio

import structlog

from conductor.logging import bound_contextvars


def test_keys_are_bound_inside_and_restored_after():
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(task_id="outer")
    with bound_contextvars(task_id="inner", round=2):
        assert structlog.contextvars.get_contextvars() == {"task_id": "inner", "round": 2}
        structlog.contextvars.bind_contextvars(step=1)  # bound inside, by hand: still there after
    assert structlog.contextvars.get_contextvars() == {"task_id": "outer", "step": 1}
    structlog.contextvars.clear_contextvars()


def test_restored_when_the_block_raises():
    structlog.contextvars.clear_contextvars()
    try:
        with bound_contextvars(task_id="t"):
            raise ValueError
    except ValueError:
        pass
    assert structlog.contextvars.get_contextvars() == {}


async def test_each_task_sees_its_own():
    structlog.contextvars.clear_contextvars()

    async def handle(task_id: str) -> dict[str, object]:
        with bound_contextvars(task_id=task_id):
            await asyncio.sleep(0.01)
            return structlog.contextvars.get_contextvars()

    assert await asyncio.gather(handle("a"), handle("b")) == [{"task_id": "a"}, {"task_id": "b"}]
