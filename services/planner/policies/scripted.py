"""A scripted policy for tests: honest about being a script — it replays configured completions in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schemas.learner import PolicyCard
from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.policy import PolicyError, Sample

ONE_CALL = Usage(input_tokens=100, output_tokens=50, calls=1)
"""What each scripted sample reports, so usage accounting is exercised; tests may pass their own."""

Script = Sequence[str | PolicyError] | Callable[[Sequence[ChatMessage]], str]


class ScriptedPolicy:
    """Each sample is the next item of ``script`` (a ``PolicyError`` item is raised instead), or ``script(messages)``
    when it is a function. Running out of script is a ``PolicyError``, never a silent repeat. Every call's messages
    are kept in ``calls`` for assertions."""

    def __init__(
        self,
        script: Script,
        *,
        name: str = "scripted",
        usage: Usage = ONE_CALL,
        card: PolicyCard | None = None,
    ) -> None:
        self.name = name
        self._script = script
        self._next = 0
        self._usage = usage
        self.calls: list[list[ChatMessage]] = []
        self.card: PolicyCard | None = card

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        self.calls.append(list(messages))
        return [Sample(text=self._one(messages), usage=self._usage) for _ in range(n)]

    def _one(self, messages: Sequence[ChatMessage]) -> str:
        if callable(self._script):
            return self._script(messages)
        if self._next >= len(self._script):
            raise PolicyError(f"script exhausted after {self._next} samples", retryable=False)
        item = self._script[self._next]
        self._next += 1
        if isinstance(item, PolicyError):
            raise item
        return item

    async def aclose(self) -> None:
        return None
