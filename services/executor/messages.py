"""How a step's worker sees the conversation: its message template (docs/method.md §2, ours).

- No history granted: one user turn, ``question + "\\n\\n" + subtask``.
- History granted: the granted (subtask, response) pairs, in step order, become alternating user/assistant turns.
  The first user turn carries the question followed by the first granted subtask (so roles strictly alternate,
  which every provider accepts); each later granted subtask is a user turn; each response an assistant turn; the
  last user turn is this step's own subtask.
- Answer format: when the step gets one (conductor/answer_format.py decides from the pool, the task's domain and
  whether the step is its round's last), the instruction follows this step's own subtask in its user turn, after a
  blank line. Only this step's turn carries it; granted history shows earlier subtasks as the Conductor wrote them.
- Recursion rounds: the previous round's final response is granted to every step with ``"all"`` access, as the
  first pair, under the subtask ``PREVIOUS_ROUND_SUBTASK``. Integer access indices refer to this round's steps.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.plan import Access
from schemas.work import ChatMessage

PREVIOUS_ROUND_SUBTASK = "Result of the previous coordination strategy (the answer being revised)."


def granted_steps(index: int, access: Access) -> list[int]:
    """Indices of the earlier steps a step may see; the parser already rejected anything else."""
    if access == "all":
        return list(range(index))
    return sorted(set(access))


def build_messages(
    question: str,
    subtask: str,
    history: Sequence[tuple[str, str]],
    *,
    answer_format: str | None = None,
) -> list[ChatMessage]:
    """``history`` is the granted (subtask, response) pairs in order; ``answer_format`` this step's instruction."""
    if answer_format:
        subtask = f"{subtask}\n\n{answer_format}"
    if not history:
        return [ChatMessage(role="user", content=f"{question}\n\n{subtask}")]
    first_sub, first_resp = history[0]
    msgs = [
        ChatMessage(role="user", content=f"{question}\n\n{first_sub}"),
        ChatMessage(role="assistant", content=first_resp),
    ]
    for sub, resp in history[1:]:
        msgs.append(ChatMessage(role="user", content=sub))
        msgs.append(ChatMessage(role="assistant", content=resp))
    msgs.append(ChatMessage(role="user", content=subtask))
    return msgs
