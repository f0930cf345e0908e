"""A dedicated event-loop thread, so synchronous code (TRL's reward function, the trainer loop) can await NATS.

TRL calls a reward function synchronously from its training loop; the NATS connection, the requester and (for a
local run) the rollout services themselves live on one asyncio loop that runs in its own thread for the whole run.
``run`` submits a coroutine to that loop and blocks the caller until it finishes — the trainer thread never owns a
loop, and the loop never blocks on torch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """``with LoopThread() as loop: loop.run(coro)``; stopping cancels what is still running on it."""

    def __init__(self, name: str = "learner-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def start(self) -> LoopThread:
        if not self._started:
            self._thread.start()
            self._started = True
        return self

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """The coroutine's result (or exception), run on the loop thread; ``timeout`` cancels it there."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop: it would deadlock")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def stop(self) -> None:
        if not self._started:
            return
        self.run(_cancel_others())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self._started = False

    def __enter__(self) -> LoopThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _cancel_others() -> None:
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
