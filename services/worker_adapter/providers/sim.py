r"""Simulated worker: a deterministic, seeded stand-in for an LLM, so tests, demos and CPU-scale RL need no model.

It knows answers only from its dataset JSONL (records ``{id, domain, question, answer, wrong[]}``); nothing in the
request can tell it the reference. Every draw comes from ``random.Random`` seeded with SHA-256 of (pool seed, worker
name, question, subtask, digest of the granted turns, the request's round/step) — never Python's per-process
``hash()`` — so an identical request always gets an identical reply, in any process, while the same worker asked
again at another step makes a fresh (but correlated, see 4.) attempt. With ``vary_by_task`` the task id joins the
seed, so the same question in another task (an eval's next repeat) is a fresh, still correlated, attempt.

How one call is answered (s = the worker's skill for the record's domain, else ``default_skill``):

1. Question: the longest dataset question contained in the first user message (else in any user message). Unknown
   question -> an honest "I don't know" with no final answer. Subtask: the last user turn, minus the question.
2. Evidence: the final answer of each earlier assistant turn (``\boxed{..}``, ``Answer: X``, ``Final answer: ..``),
   normalised and grouped: c = how many equal the dataset answer, w_x = how many equal each other answer x.
   Turns without a final answer carry no evidence.
3. Probability of answering correctly::

       no evidence:    P = s
       with evidence:  q = c² / (c² + Σ_x w_x² + δ)                  # sharpened vote share of the right answer
                       P = s · (1 − λ·A·(1 − s)·(1 − q)) + (1 − s) · λ · q

   λ = 1 when the subtask asks to use the context (verify, check, review, refine, aggregate, combine, ... see
   ``REVIEW_WORDS``), 0.5 otherwise; A = 0.5 (anchoring); δ = 0.1 (doubt, so even a unanimous context is not
   copied blindly). As a story: with probability s the worker knows the answer, but wrong context talks it out of
   it with probability λ·A·(1 − s)·(1 − q) — less often the stronger it is; with probability 1 − s it does not
   know, and with probability λ adopts an answer from the context, choosing ∝ c² for the right one, ∝ w_x² for a
   wrong x and ∝ δ for a wrong guess of its own. Consequences: a correct majority is kept with high probability;
   wrong earlier answers get repeated; P increases with s for every context (dP/ds ≥ (1 − A)(1 − q) ≥ 0), so a
   strong reviewer helps more than a weak one; independent weak attempts plus a strong aggregator beat a weak
   worker alone, and solve-then-verify beats solving alone.
4. Correlation: whether the worker "knows" is drawn, with probability κ = 0.5, from a latent uniform seeded only by
   (seed, worker, question); so asking one worker again helps less than asking a different one, as with real
   models at low temperature. Each draw is still uniform, so P above is exact.
5. Wrong answers come from the record's ``wrong`` list. Output format by domain: math ends ``\boxed{ANSWER}``, mcq
   ends ``Answer: X``, code ends with the answer (a program) in one fenced ``python`` block — so the real code
   verifier runs it and a record's ``wrong`` programs are buggy ones — anything else ends ``Final answer: ...``;
   a few reasoning sentences come first.
6. Cost and time: tokens = ceil(characters × ``tokens_per_char``) for input (all messages) and output; output longer
   than ``max_tokens`` is cut, losing its final answer, as a real truncation would. It sleeps ``latency_s`` plus
   uniform jitter up to ``latency_jitter_s``, then fails with a simulated HTTP 500 with probability
   ``failure_rate``, drawn per attempt so the core's retries can succeed.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import msgspec

from conductor.pool import Pool, PoolError, SimSpec, WorkerSpec
from schemas.work import ChatMessage, FaultReason
from services.worker_adapter.provider import (
    CallParams,
    Completion,
    PermanentProviderError,
    TransientProviderError,
)

ANCHORING = 0.5  # A: how strongly wrong context sways a worker that knows the answer
DOUBT = 0.1  # δ: pseudo-vote for "none of the above", so a unanimous context is not copied blindly
PLAIN_TRUST = 0.5  # λ when the subtask does not ask to use the context
REVIEW_TRUST = 1.0  # λ when it does
CORRELATION = 0.5  # κ: share of "knows" draws taken from the per-(worker, question) latent

REVIEW_WORDS = (
    "verify",
    "check",
    "review",
    "refine",
    "improve",
    "aggregate",
    "combine",
    "compare",
    "consensus",
    "critique",
    "correct",
    "revise",
    "synthes",
    "evaluat",
    "judge",
    "confirm",
    "reconcile",
    "majority",
    "previous",
    "above",
    "earlier",
    "best answer",
    "final answer",
)
"""Substrings (lower case) that mark a subtask as asking the worker to use the granted context."""

UNKNOWN_TEXT = "I don't know the answer to this question, and I would rather not guess."

_REASONING = (
    "Let me restate the problem to make sure I read it correctly.",
    "I will work through this step by step.",
    "The key fact here is worth recalling before computing anything.",
    "Checking the edge cases rules out a couple of tempting options.",
    "Putting the pieces together gives a single consistent result.",
    "A quick sanity check agrees with this.",
    "Eliminating the alternatives one by one leaves one candidate.",
    "This follows directly once the definitions are written down.",
    "Writing the intermediate quantities out explicitly avoids an arithmetic slip.",
    "Two different routes to the result should agree, so I compare them.",
    "The wording of the question matters here, so I reread it once more.",
    "A common misconception leads to a different answer, which I avoid.",
)
_REVIEWING = (
    "I read the earlier responses carefully.",
    "I compared the candidate answers from the previous steps.",
    "Re-deriving the key step independently tells me which one holds up.",
)

_OWN = "\x00own"  # keys no normalised answer can equal
_TRUTH = "\x00truth"
_BRACE = {"{": 1, "}": -1}
_BOXED = re.compile(r"\\boxed\{")
_ANSWER_LINE = re.compile(r"(?im)^\s*(?:final answer|answer)\s*[:：]\s*(.+?)\s*$")
_PROGRAM = re.compile(r"(?s)```(?:python|py)?[ \t]*\n(.*?)```")


class QuestionRecord(msgspec.Struct, frozen=True, kw_only=True):
    domain: str
    question: str
    answer: str
    wrong: list[str] = []
    id: str = ""


FOUND_KEPT = 1024
FOUND_KEPT_CHARS = 4096
"""A dataset remembers the question of up to FOUND_KEPT prompt texts of up to FOUND_KEPT_CHARS characters each,
then starts over: a few MiB at most."""


class Dataset:
    """The questions one sim worker knows, indexed for finding a question inside a prompt."""

    def __init__(self, records: Sequence[QuestionRecord]) -> None:
        self.records = [r for r in records if r.question.strip()]
        self._by_prefix: dict[str, list[QuestionRecord]] = {}
        for r in self.records:
            self._by_prefix.setdefault(r.question[:48], []).append(r)
        self._found: dict[str, QuestionRecord | None] = {}  # ``find``'s answers, up to FOUND_KEPT texts

    @classmethod
    def load(cls, path: Path) -> Dataset:
        decoder = msgspec.json.Decoder(QuestionRecord)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
            return cls([decoder.decode(line) for line in lines if line.strip()])
        except (OSError, msgspec.DecodeError) as exc:
            raise PermanentProviderError(
                f"sim dataset {path} is unreadable: {exc}", reason=FaultReason.CONFIG
            ) from exc

    def find(self, text: str) -> QuestionRecord | None:
        """The longest known question inside ``text``; the common question-first prompt is a dictionary hit, and
        a text seen before (a task's first user turn, asked of every step) is remembered."""
        try:
            return self._found[text]
        except KeyError:
            pass
        found = self._search(text)
        if len(text) <= FOUND_KEPT_CHARS:
            if len(self._found) >= FOUND_KEPT:
                self._found.clear()
            self._found[text] = found
        return found

    def _search(self, text: str) -> QuestionRecord | None:
        hits = [r for r in self._by_prefix.get(text[:48], []) if text.startswith(r.question)]
        if not hits:
            hits = [r for r in self.records if r.question in text]
        return max(hits, key=lambda r: len(r.question), default=None)


def check_datasets(pool: Pool) -> None:
    """Each sim worker's dataset can be opened: checked at start-up (a ``PoolError`` naming the worker and the path)
    rather than failing the worker's first call; its records are read on first use, as before."""
    for i, w in enumerate(pool.workers):
        if w.sim is None:
            continue
        path = pool.resolve(w.sim.dataset)
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise PoolError(f"workers[{i}] ({w.name!r}): sim dataset {path}: {exc.strerror}") from None


def normalize(answer: str) -> str:
    """Loose equality for final answers: case, spaces, surrounding ``$``, trailing full stop and ``\\left/\\right``."""
    text = answer.strip(" \t\n.$")
    text = text.replace("\\left", "").replace("\\right", "").replace("\\!", "")
    return re.sub(r"\s+", "", text).lower()


def _boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}``, braces balanced."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, i = 1, starts[-1]
    while i < len(text):
        depth += _BRACE.get(text[i], 0)
        if depth == 0:
            return text[starts[-1] : i]
        i += 1
    return None


def extract_answer(text: str) -> str | None:
    """The final answer a response commits to, in any of the three output formats; ``None`` if it commits to none."""
    boxed = _boxed(text)
    if boxed is not None:
        return boxed
    programs = _PROGRAM.findall(text)  # before answer lines: a program may hold a line starting "answer:"
    if programs:
        return programs[-1].strip()
    lines = _ANSWER_LINE.findall(text)
    return lines[-1] if lines else None


def is_review(subtask: str) -> bool:
    low = subtask.lower()
    return any(word in low for word in REVIEW_WORDS)


def p_correct(skill: float, correct: int, wrong: Sequence[int], review: bool) -> float:
    """The module docstring's formula: ``correct`` = c, ``wrong`` = the counts w_x of each distinct wrong answer."""
    if correct == 0 and not any(wrong):
        return skill
    trust = REVIEW_TRUST if review else PLAIN_TRUST
    q = correct**2 / (correct**2 + sum(w * w for w in wrong) + DOUBT)
    return skill * (1 - trust * ANCHORING * (1 - skill) * (1 - q)) + (1 - skill) * trust * q


class Reading(msgspec.Struct, frozen=True, kw_only=True):
    """What the sim takes from a conversation: the record, its own subtask and the earlier final answers."""

    record: QuestionRecord | None
    subtask: str
    # Normalised final answers of the earlier assistant turns, in order; turns without one are dropped.
    earlier: list[str]
    context: str  # SHA-256 of the granted assistant turns: a different context is a different draw


def read_conversation(messages: Sequence[ChatMessage], dataset: Dataset) -> Reading:
    users = [m.content for m in messages if m.role == "user"]
    record = dataset.find(users[0]) if users else None
    if record is None:
        record = next((r for u in users[1:] if (r := dataset.find(u)) is not None), None)
    subtask = users[-1] if users else ""
    if record is not None:
        subtask = subtask.replace(record.question, "").strip()
    turns = [m.content for m in messages if m.role == "assistant"]
    answers = [a for a in map(extract_answer, turns) if a is not None]
    context = hashlib.sha256("\x1e".join(turns).encode()).hexdigest()
    return Reading(record=record, subtask=subtask, earlier=[normalize(a) for a in answers], context=context)


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys])[0]


def choose_answer(
    rng: random.Random,
    latent: float,
    skill: float,
    record: QuestionRecord,
    earlier: Sequence[str],
    review: bool,
) -> str | None:
    """Sample the final answer as the module docstring describes; ``None`` = no answer (no wrong option known)."""
    truth = normalize(record.answer)
    own_wrong = rng.choice(record.wrong) if record.wrong else None
    knows = (latent if rng.random() < CORRELATION else rng.random()) < skill
    votes = Counter(earlier)
    c = votes.pop(truth, 0)
    if c == 0 and not votes:
        return record.answer if knows else own_wrong
    trust = REVIEW_TRUST if review else PLAIN_TRUST
    q = c * c / (c * c + sum(w * w for w in votes.values()) + DOUBT)
    wrong_weights: dict[str, float] = {x: float(w * w) for x, w in votes.items()}
    if knows:
        if rng.random() >= trust * ANCHORING * (1 - skill) * (1 - q):
            return record.answer
        swayed = _pick(rng, {**wrong_weights, _OWN: DOUBT})
        return own_wrong if swayed == _OWN else _original(swayed, record)
    if rng.random() >= trust:
        return own_wrong
    adopted = _pick(rng, {_TRUTH: float(c * c), **wrong_weights, _OWN: DOUBT})
    if adopted == _TRUTH:
        return record.answer
    return own_wrong if adopted == _OWN else _original(adopted, record)


def _original(normalised: str, record: QuestionRecord) -> str:
    """Repeat a wrong answer in the record's spelling when it is one of the record's; else as normalised."""
    return next((w for w in record.wrong if normalize(w) == normalised), normalised)


def render(domain: str, answer: str | None, rng: random.Random, review: bool) -> str:
    """A few reasoning sentences, then the final answer in the domain's format."""
    if answer is None:
        return UNKNOWN_TEXT
    sentences = rng.choices(_REASONING, k=rng.randint(6, 16))  # about 80-220 tokens, like a terse real answer
    if review:
        sentences = [rng.choice(_REVIEWING), *sentences]
    body = " ".join(sentences)
    if domain == "math":
        return f"{body}\nTherefore, the final answer is $\\boxed{{{answer}}}$."
    if domain == "mcq":
        return f"{body}\nAnswer: {answer}"
    if domain == "code":
        return f"{body}\n```python\n{answer.strip()}\n```"
    return f"{body}\nFinal answer: {answer}"


def tokens(chars: int, per_char: float) -> int:
    return max(1, math.ceil(chars * per_char)) if chars else 0


class SimProvider:
    """The ``sim`` provider; datasets are read on first use, once per file."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._datasets: dict[str, Dataset] = {}  # keyed by the pool's dataset string: no path work per call
        self._latents: dict[tuple[int, str, str], float] = {}

    def _latent(self, seed: int, worker: str, question: str) -> float:
        """The worker's fixed aptitude for one question (a draw of its own); remembered, as the dataset bounds it."""
        key = (seed, worker, question)
        value = self._latents.get(key)
        if value is None:
            value = self._latents[key] = _rng(seed, worker, question, "latent").random()
        return value

    def dataset(self, sim: SimSpec) -> Dataset:
        found = self._datasets.get(sim.dataset)
        if found is None:
            found = self._datasets[sim.dataset] = Dataset.load(self._pool.resolve(sim.dataset))
        return found

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        sim = spec.sim
        if sim is None:
            raise PermanentProviderError(
                f"worker {spec.name!r}: provider 'sim' needs a [workers.sim] table", reason=FaultReason.CONFIG
            )
        reading = read_conversation(messages, self.dataset(sim))
        question = reading.record.question if reading.record else ""
        call = (sim.seed, spec.name, question, reading.subtask, reading.context, params.sample)
        if (
            sim.vary_by_task
        ):  # a fresh draw per task (the latent aptitude below stays per worker and question)
            call = (*call, params.task)
        rng = _rng(*call)
        delay = sim.latency_s + sim.latency_jitter_s * rng.random()  # drawn even when zero: the same stream
        if delay > 0:  # a zero-latency worker answers in the same loop turn: no extra pass of the event loop
            await asyncio.sleep(delay)
        if (
            sim.failure_rate and _rng(*call, "fail", params.attempt).random() < sim.failure_rate
        ):  # fresh per try
            raise TransientProviderError(
                "simulated provider error",
                reason=FaultReason.SERVER_ERROR,
                status=500,
                detail="HTTP 500 (simulated)",
            )
        text = self._answer(spec, sim, reading, rng)
        limit = int(params.max_tokens / sim.tokens_per_char)
        text = text[:limit]  # truncated output loses its final answer, as with a real model
        return Completion(
            text=text,
            input_tokens=tokens(sum(len(m.content) for m in messages), sim.tokens_per_char),
            output_tokens=min(tokens(len(text), sim.tokens_per_char), params.max_tokens),
            model=spec.model or spec.name,
        )

    def _answer(self, spec: WorkerSpec, sim: SimSpec, reading: Reading, rng: random.Random) -> str:
        record = reading.record
        if record is None:
            return UNKNOWN_TEXT
        skill = sim.skill.get(record.domain, sim.default_skill)
        review = is_review(reading.subtask) and bool(reading.earlier)
        latent = self._latent(sim.seed, spec.name, record.question)
        answer = choose_answer(rng, latent, skill, record, reading.earlier, review)
        return render(record.domain, answer, rng, review)

    async def aclose(self) -> None:
        self._datasets.clear()
