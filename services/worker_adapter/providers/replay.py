"""Replay worker: a real model's recorded answer to the question, looked up in the replay tables (docs/replay.md).

A worker ``provider = "replay"`` names a recorded model (``[workers.replay] model``). Its answer to a call:

1. The record: by the task id when it names one (``tasks.replay.item_task_id``), else the longest recorded question
   inside the first user message (then any user message). None: a permanent ``client_error`` naming the question
   — a replay worker never invents an answer.
2. A step that sees no earlier step (no assistant turn in the messages) returns the recorded text verbatim: exact.
3. A step that sees earlier steps follows the pool's behaviour model (``[workers.replay] behaviour``, one per pool):
   - ``own``: its own recorded answer, verbatim. A real model shown other answers may change its mind; this one
     never does, so reviewing, refining and aggregating steps add nothing of their own.
   - ``majority``: the most common final answer among the seen steps' answers and its own (ties to its own),
     replied with the verbatim text of a step that gave it (its own text when its own answer wins). A real model
     does not count votes: it may follow a persuasive minority, or find an answer nobody gave; this one only ever
     repeats an answer it was shown or its own.
   Final answers are read per set in the verifier's order (``final_answer``); a text without one abstains.
4. Usage: input tokens = every message of the prompt actually built, output tokens = the recorded text, both
   counted with SmolLM2-135M-Instruct's tokenizer (``tasks/data/replay/smollm2-tokenizer.json.gz``, Apache-2.0; the
   recorded models' own tokenizers are not shipped, so counts are an estimate of theirs). Dollars: the pool's
   prices. o1-mini's hidden reasoning tokens are not in its recorded text: its cost is a lower bound.
5. ``Completion.model`` is ``replay:<behaviour>:<model>``, so every worker reply (and the step built from it)
   names the behaviour model.
"""

from __future__ import annotations

import functools
import gzip
from collections import Counter
from collections.abc import Sequence

from conductor.pool import Pool, PoolError, WorkerSpec
from schemas.work import ChatMessage, FaultReason
from services.worker_adapter.provider import CallParams, Completion, PermanentProviderError
from tasks import literal, replay
from tasks.answers import normalize_text
from tasks.finals import stated_answer

TOKENIZER = "smollm2-tokenizer.json.gz"


@functools.cache
def _tokenizer():  # tokenizers is imported on first use only
    from tokenizers import Tokenizer

    data = gzip.decompress((replay.shipped_dir() / TOKENIZER).read_bytes()).decode("utf-8")
    return Tokenizer.from_str(data)


def count_tokens(texts: Sequence[str]) -> int:
    """Tokens of ``texts`` under the shipped SmolLM2 tokenizer (no special tokens added)."""
    if not any(texts):
        return 0
    return sum(len(e.ids) for e in _tokenizer().encode_batch(list(texts), add_special_tokens=False))


def final_answer(set_name: str, text: str) -> str | None:
    """The final answer ``text`` commits to, normalised so equal answers compare equal; None when it has none.

    Read in the verifier's order (tasks/finals.py ``stated_answer``: ZeroEval's JSON ``answer`` field, a box, an
    answer line); multiple choice: the letter; crux: the evaluated literal's spelling (tasks/literal.py); math: the
    exact-match normal form.
    """
    stated = stated_answer(text, "mcq" if set_name == "mmlu-redux" else None)
    if stated is None or set_name == "mmlu-redux":
        return stated
    return literal.canonical(stated) if set_name == "crux" else normalize_text(stated)


def majority_text(set_name: str, own: str, seen: Sequence[str]) -> str:
    """The ``majority`` behaviour: the verbatim text giving the most common final answer, ties to ``own``'s."""
    mine = final_answer(set_name, own)
    answers = [(text, final_answer(set_name, text)) for text in seen]
    votes = Counter(a for _, a in answers if a is not None)
    if mine is not None:
        votes[mine] += 1
    if not votes:
        return own
    top = max(votes.values())
    if mine is not None and votes[mine] == top:
        return own
    winner = next(a for a, n in votes.items() if n == top)  # first seen among the tied: the earliest step's
    return next(text for text, a in answers if a == winner)


def check_pool(pool: Pool, spec: str) -> None:
    """Start-up check: every replay worker's model is in the tables ``spec`` names (a ``PoolError`` otherwise)."""
    models = {w.replay.model for w in pool.workers if w.replay is not None}
    if not models:
        return
    try:
        replay.load_index(spec).check_models(models)
    except replay.ReplayError as exc:
        raise PoolError(str(exc)) from None


class ReplayProvider:
    """The ``replay`` provider; the tables are read on first use, once per process (``tasks.replay.load_index``)."""

    def __init__(self, pool: Pool, spec: str = "") -> None:
        self._pool = pool
        self._spec = spec

    def _record(self, messages: Sequence[ChatMessage], params: CallParams) -> replay.ReplayRecord:
        index = replay.load_index(self._spec)
        users = [m.content for m in messages if m.role == "user"]
        found = index.by_task_id(params.task)
        for text in users:
            found = found or index.find(text)
        if found is None:
            raise replay.NoRecordError(
                f"no replay record for task {params.task!r} or its question "
                f"{' '.join((users[0] if users else '').split())[:80]!r}"
            )
        return found

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        if spec.replay is None:
            raise PermanentProviderError(
                f"worker {spec.name!r}: provider 'replay' needs a [workers.replay] table",
                reason=FaultReason.CONFIG,
            )
        try:
            record = self._record(messages, params)
            own = replay.load_index(self._spec).answer(record, spec.replay.model).text
        except replay.NoRecordError as exc:
            raise PermanentProviderError(str(exc), reason=FaultReason.CLIENT_ERROR) from None
        except replay.ReplayError as exc:  # an unreadable table or a model it lacks: the deployment's fault
            raise PermanentProviderError(str(exc), reason=FaultReason.CONFIG) from None
        seen = [m.content for m in messages if m.role == "assistant"]
        text = own
        if seen and spec.replay.behaviour == "majority":
            text = majority_text(record.set, own, seen)
        return Completion(
            text=text,
            input_tokens=count_tokens([m.content for m in messages]),
            output_tokens=count_tokens([text]),
            model=f"replay:{spec.replay.behaviour}:{spec.replay.model}",
        )

    async def aclose(self) -> None:
        return None
