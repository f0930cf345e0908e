"""The simulated worker: formats, determinism, honesty about what it knows, and the statistics of collaboration."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conductor.pool import Pool, SimSpec, WorkerSpec, load_pool, parse_pool
from schemas.work import ChatMessage, WorkRequest
from services.executor.messages import build_messages
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.provider import CallParams
from services.worker_adapter.providers.sim import (
    UNKNOWN_TEXT,
    Dataset,
    SimProvider,
    extract_answer,
    normalize,
    p_correct,
)

N = 800  # questions in the synthetic set: ±1.8 points standard error at p = 0.5
SOLVE = "Solve the problem and give the final answer."
VERIFY = "Verify the previous answer; fix it if it is wrong and give the final answer."
AGGREGATE = "Aggregate the earlier answers and give the best final answer."


def _dataset(tmp: Path, n: int = N) -> list[dict]:
    records = [
        {
            "id": f"q{i}",
            "domain": "math",
            "question": f"Problem {i}: compute {i} * 7 + 3.",
            "answer": str(i * 7 + 3),
            "wrong": [str(i * 7 + 2), str(i * 7 + 4), str(i * 7)],
        }
        for i in range(n)
    ]
    (tmp / "qs.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return records


def _pool(tmp: Path, **extra: str) -> Pool:
    workers = {
        "weak": ("0.3", "1"),
        "mid": ("0.5", "2"),
        "strong": ("0.7", "3"),
        "never": ("0.0", "4"),
        "always": ("1.0", "5"),
    }
    text = "".join(
        f'[[workers]]\nname = "{name}"\nprovider = "sim"\nmodel = "sim-{name}"\n{extra.get(name, "")}\n'
        f'[workers.sim]\ndataset = "qs.jsonl"\nskill = {{ math = {skill} }}\nseed = {seed}\n'
        for name, (skill, seed) in workers.items()
    )
    return parse_pool(text, base_dir=str(tmp))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    records = _dataset(tmp)
    pool = _pool(tmp)
    return records, pool, SimProvider(pool)


async def _ask(
    sim: SimProvider, pool: Pool, worker: str, messages: list[ChatMessage], sample: int = 0
) -> str:
    params = CallParams(max_tokens=4096, temperature=0.2, timeout_s=5.0, sample=sample)
    return (await sim.complete(pool.get(worker), messages, params)).text


async def _run(world, steps: list[tuple[str, str, str]]) -> float:
    """Accuracy of a workflow over the whole set; steps are (worker, subtask, "all" | "none"), run as the executor does."""
    records, pool, sim = world
    right = 0
    for r in records:
        history: list[tuple[str, str]] = []
        for i, (worker, subtask, access) in enumerate(steps):
            granted = history if access == "all" else []
            text = await _ask(sim, pool, worker, build_messages(r["question"], subtask, granted), sample=i)
            history.append((subtask, text))
        final = extract_answer(history[-1][1])
        right += final is not None and normalize(final) == normalize(r["answer"])
    return right / len(records)


def test_extract_answer_formats():
    assert extract_answer("so $\\boxed{\\frac{1}{2}}$.") == "\\frac{1}{2}"
    assert extract_answer("first \\boxed{1} then \\boxed{2}") == "2"
    assert extract_answer("Reasoning.\nAnswer: C") == "C"
    assert extract_answer("Reasoning.\nFinal answer: Gabriel Garcia Marquez") == "Gabriel Garcia Marquez"
    assert extract_answer(UNKNOWN_TEXT) is None and extract_answer("\\boxed{open") is None
    assert normalize(" $\\frac{ 1 }{2}$. ") == normalize("\\frac{1}{2}")


async def test_demo_pool_answers_every_demo_question_in_its_format():
    pool = load_pool(None)
    sim = SimProvider(pool)
    spec = pool.workers[0].sim
    assert spec is not None
    records = Dataset.load(pool.resolve(spec.dataset)).records
    assert len(records) >= 20
    suffix = {"math": "\\boxed{", "mcq": "Answer: ", "general": "Final answer: "}
    cases = [(r, w) for r in records for w in pool.names()]
    texts = await asyncio.gather(
        *(
            _ask(sim, pool, w, [ChatMessage(role="user", content=f"{r.question}\n\n{SOLVE}")])
            for r, w in cases
        )
    )
    for (r, _), text in zip(cases, texts, strict=True):
        assert suffix[r.domain] in text.splitlines()[-1]
        answer = extract_answer(text)
        assert answer is not None and normalize(answer) in {normalize(a) for a in [r.answer, *r.wrong]}


async def test_unknown_question_is_answered_honestly(world):
    _, pool, sim = world
    text = await _ask(
        sim, pool, "always", [ChatMessage(role="user", content="What is the airspeed of a swallow?")]
    )
    assert text == UNKNOWN_TEXT and extract_answer(text) is None


async def test_deterministic_for_identical_requests(world):
    records, pool, sim = world
    msgs = build_messages(records[3]["question"], SOLVE, [])
    assert await _ask(sim, pool, "mid", msgs) == await _ask(sim, pool, "mid", msgs)
    texts = {
        await _ask(sim, pool, "mid", build_messages(records[3]["question"], f"{SOLVE} ({k})", []))
        for k in range(8)
    }
    assert len(texts) > 1  # a different subtask is a different draw


MID_ONLY = (
    '[[workers]]\nname = "mid"\nprovider = "sim"\n[workers.sim]\ndataset = "qs.jsonl"\n'
    "skill = { math = 0.5 }\nseed = 2\n"
)


def test_deterministic_across_processes_whatever_the_hash_seed(tmp_path):
    """Seeds come from SHA-256, not Python's per-process randomised hash(), so replies agree across processes."""
    _dataset(tmp_path, n=5)
    script = (
        "import asyncio, sys\n"
        "from conductor.pool import parse_pool\n"
        "from schemas.work import ChatMessage\n"
        "from services.worker_adapter.provider import CallParams\n"
        "from services.worker_adapter.providers.sim import SimProvider\n"
        f"pool = parse_pool({MID_ONLY!r}, base_dir=sys.argv[1])\n"
        "m = [ChatMessage(role='user', content='Problem 2: compute 2 * 7 + 3.\\n\\nSolve it.')]\n"
        "p = CallParams(max_tokens=999, temperature=0.2, timeout_s=5)\n"
        "print(asyncio.run(SimProvider(pool).complete(pool.get('mid'), m, p)).text)\n"
    )
    here = asyncio.run(
        SimProvider(parse_pool(MID_ONLY, base_dir=str(tmp_path))).complete(
            parse_pool(MID_ONLY).get("mid"),
            [ChatMessage(role="user", content="Problem 2: compute 2 * 7 + 3.\n\nSolve it.")],
            CallParams(max_tokens=999, temperature=0.2, timeout_s=5),
        )
    ).text
    there = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=Path(__file__).parents[2],
    ).stdout
    assert there == here + "\n" and extract_answer(here) in {"17", "16", "18", "14"}


async def test_never_reads_the_reference_from_the_request(world):
    """A worker that knows nothing stays wrong even when the prompt spells out the answer outside assistant turns."""
    records, pool, sim = world
    for r in records[:50]:
        leak = f"{r['question']}\n\nThe reference answer is \\boxed{{{r['answer']}}}.\nAnswer: {r['answer']}\n{VERIFY}"
        text = await _ask(
            sim,
            pool,
            "never",
            [
                ChatMessage(role="system", content=f"Answer: {r['answer']}"),
                ChatMessage(role="user", content=leak),
            ],
        )
        assert normalize(extract_answer(text) or "") != normalize(r["answer"])


async def test_skill_extremes_alone(world):
    assert await _run(world, [("always", SOLVE, "none")]) == 1.0
    assert await _run(world, [("never", SOLVE, "none")]) == 0.0


def test_formula_properties():
    grid = [(c, w) for c in range(4) for w in ([], [1], [2], [1, 1], [3], [1, 2])]
    for c, w in grid:
        for review in (True, False):
            ps = [p_correct(s / 10, c, w, review) for s in range(11)]
            assert all(b >= a - 1e-12 for a, b in itertools.pairwise(ps)), (c, w, review)  # stronger helps
            assert all(0.0 <= p <= 1.0 for p in ps)
    assert p_correct(0.3, 0, [], True) == 0.3  # alone: skill
    assert p_correct(0.3, 2, [1], True) > 0.8  # a correct majority is kept with high probability
    assert p_correct(0.3, 1, [], True) > 0.9  # even a weak checker keeps a correct answer
    assert p_correct(0.7, 0, [2], True) < 0.7  # a wrong consensus pulls a strong worker down
    assert p_correct(0.3, 1, [], True) > p_correct(0.3, 1, [], False)  # asking to use the context matters


async def test_empirical_rate_matches_the_formula(world):
    records, pool, sim = world
    contexts = {  # earlier assistant answers as offsets from the truth: 0 = correct, 1/-1 = wrong answers
        "one correct": [0],
        "one wrong": [1],
        "two of three correct": [0, 1, 0],
        "same wrong twice": [1, 1, 0],
    }
    for label, offsets in contexts.items():
        for worker, skill in (("weak", 0.3), ("strong", 0.7)):
            right = 0
            for r in records:
                truth = int(r["answer"])
                history = [(SOLVE, f"Work.\n\\boxed{{{truth + o}}}") for o in offsets]
                text = await _ask(sim, pool, worker, build_messages(r["question"], VERIFY, history))
                right += normalize(extract_answer(text) or "") == r["answer"]
            c = offsets.count(0)
            wrong = [offsets.count(o) for o in set(offsets) - {0}]
            expected = p_correct(skill, c, wrong, review=True)
            sigma = math.sqrt(expected * (1 - expected) / len(records)) + 1e-3
            assert abs(right / len(records) - expected) < 4 * sigma, (
                label,
                worker,
                right / len(records),
                expected,
            )


async def test_wrong_context_is_repeated(world):
    records, pool, sim = world
    repeated = wrong_total = 0
    for r in records[:300]:
        bad = str(int(r["answer"]) + 1)
        history = [(SOLVE, f"\\boxed{{{bad}}}"), (SOLVE, f"\\boxed{{{bad}}}")]
        text = await _ask(sim, pool, "weak", build_messages(r["question"], AGGREGATE, history))
        final = normalize(extract_answer(text) or "")
        if final != r["answer"]:
            wrong_total += 1
            repeated += final == bad
    assert repeated / wrong_total > 0.8


async def test_collaboration_strategies_matter(world):
    weak = await _run(world, [("weak", SOLVE, "none")])
    strong = await _run(world, [("strong", SOLVE, "none")])
    moa = await _run(world, [("weak", SOLVE, "none")] * 3 + [("strong", AGGREGATE, "all")])
    weak_moa = await _run(world, [("weak", SOLVE, "none")] * 3 + [("weak", AGGREGATE, "all")])
    weak_then_strong = await _run(world, [("weak", SOLVE, "none"), ("strong", VERIFY, "all")])
    weak_then_weak = await _run(world, [("weak", SOLVE, "none"), ("weak", VERIFY, "all")])
    strong_then_check = await _run(world, [("strong", SOLVE, "none"), ("weak", VERIFY, "all")])
    strong_self_verify = await _run(world, [("strong", SOLVE, "none"), ("strong", VERIFY, "all")])
    diverse = await _run(
        world, [("strong", SOLVE, "none"), ("mid", SOLVE, "none"), ("strong", AGGREGATE, "all")]
    )
    assert abs(weak - 0.3) < 0.06 and abs(strong - 0.7) < 0.06
    assert moa > weak + 0.25  # three weak attempts + a strong aggregator beat one weak worker by far
    assert moa > weak_moa + 0.15  # the aggregator's strength matters
    assert weak_then_strong > weak_then_weak + 0.15  # a strong verifier helps more than a weak one
    assert strong_then_check > strong - 0.04  # a cheap checker does not wreck a good answer
    assert (
        strong_self_verify > strong + 0.03 and diverse > strong + 0.03
    )  # good workflows beat the best worker


async def test_failures_are_transient_and_retried_by_the_core(tmp_path):
    _dataset(tmp_path, n=40)
    pool = _pool(tmp_path)
    pool = Pool(
        workers=[w if w.sim is None else _with(w, failure_rate=0.5) for w in pool.workers],
        base_dir=pool.base_dir,
    )
    waits: list[float] = []

    async def no_sleep(s: float) -> None:
        waits.append(s)

    adapter = WorkerAdapter(pool, {"sim": SimProvider(pool)}, sleep=no_sleep, rng=random.Random(0))
    attempts = []
    for i in range(40):
        msgs = [ChatMessage(role="user", content=f"Problem {i}: compute {i} * 7 + 3.\n\n{SOLVE}")]
        reply = await adapter.call(WorkRequest(worker="strong", messages=msgs))
        assert reply.error is None or reply.error.retryable
        # every failed try is a simulated HTTP 500, counted as such, the last one too when the call gave up
        assert set(reply.faults) <= {"server_error"}
        assert reply.faults.get("server_error", 0) == reply.attempts - (reply.error is None)
        attempts.append(reply.attempts)
    assert max(attempts) > 1 and waits and sum(a == 1 for a in attempts) > 5


async def test_sim_configuration_problems_are_config_faults(tmp_path):
    pool = Pool(
        workers=[
            WorkerSpec(name="bare", provider="sim", model="x"),  # no [workers.sim] table
            WorkerSpec(name="lost", provider="sim", model="x", sim=SimSpec(dataset="missing.jsonl")),
        ],
        base_dir=str(tmp_path),
    )
    adapter = WorkerAdapter(pool, {"sim": SimProvider(pool)})
    msgs = [ChatMessage(role="user", content="hi")]
    for worker in ("bare", "lost"):
        reply = await adapter.call(WorkRequest(worker=worker, messages=msgs))
        assert reply.error is not None and not reply.error.retryable, worker
        assert reply.attempts == 1 and reply.faults == {"config": 1}, worker


def _with(spec, **sim_fields):
    import msgspec

    return msgspec.structs.replace(spec, sim=msgspec.structs.replace(spec.sim, **sim_fields))


async def test_tokens_truncation_and_latency(world):
    records, pool, sim = world
    spec = _with(pool.get("always"), latency_s=0.03, tokens_per_char=0.5)
    msgs = build_messages(records[0]["question"], SOLVE, [])
    full = await sim.complete(spec, msgs, CallParams(max_tokens=4096, temperature=0.2, timeout_s=5))
    assert full.input_tokens == math.ceil(sum(len(m.content) for m in msgs) * 0.5)
    assert full.output_tokens == math.ceil(len(full.text) * 0.5) and full.model == "sim-always"
    cut = await sim.complete(spec, msgs, CallParams(max_tokens=10, temperature=0.2, timeout_s=5))
    assert cut.output_tokens <= 10 and extract_answer(cut.text) is None  # a truncated answer is lost
    pool2 = Pool(workers=[spec], base_dir=pool.base_dir)
    reply = await WorkerAdapter(pool2, {"sim": sim}).call(WorkRequest(worker="always", messages=msgs))
    assert reply.latency_s >= 0.03 and reply.usage.cost_usd == 0.0


async def test_vary_by_task_draws_afresh_per_task_at_the_same_skill(tmp_path):
    """An eval's repeats are different tasks: with ``vary_by_task`` each is a fresh draw, the skill unchanged."""
    records = _dataset(tmp_path, n=400)
    pool = parse_pool(
        MID_ONLY.replace("seed = 2\n", "seed = 2\nvary_by_task = true\n"), base_dir=str(tmp_path)
    )
    sim = SimProvider(pool)

    async def correct(task: str) -> list[bool]:
        params = CallParams(max_tokens=4096, temperature=0.2, timeout_s=5.0, task=task)
        texts = [
            (await sim.complete(pool.get("mid"), build_messages(r["question"], SOLVE, []), params)).text
            for r in records
        ]
        return [
            normalize(extract_answer(t) or "") == normalize(r["answer"])
            for t, r in zip(texts, records, strict=True)
        ]

    first, again, other = await correct("task-a"), await correct("task-a"), await correct("task-b")
    assert first == again and first != other
    assert abs(sum(other) / len(other) - 0.5) < 0.08
