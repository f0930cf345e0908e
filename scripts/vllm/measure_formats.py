"""Measure what the answer-format instruction does for a real worker: the share of final responses that carry a
marker the verifier can read, without and with the instruction (issue 9 item 4).

Each question is one final step, built exactly as the executor builds it (services/executor/messages.py, with the
single baseline's subtask) and sent through the real worker-adapter and ``openai_compatible`` provider to a vLLM
server. "Before" passes no instruction; "after" passes the pool's default for the task's domain. A response is
*marked* when the verifier's extractor finds an answer (math: ``final_answers``; mcq: ``extract_choice`` finds
exactly one letter); *correct* uses the same pure extractors against the gold answer.

Questions: the bundled demo set's math and mcq records plus arithmetic ones generated under a fixed seed (exact
integer answers; four-option multiple choice with shuffled distractors) — nothing downloaded.

    .venv/bin/python -m scripts.vllm.measure_formats --url http://127.0.0.1:PORT/v1 --model NAME [--per-domain 30]
        [--pool FILE]   # measure the wording a pool file configures instead of the defaults
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from importlib import resources
from pathlib import Path

from conductor.answer_format import AnswerFormat
from conductor.pool import Pool, WorkerSpec, load_pool
from schemas.work import WorkRequest
from services.executor.messages import build_messages
from services.planner.baselines import ANSWER
from services.verifier.extract import final_answers
from services.verifier.mcq import extract_choice
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.providers import build_providers

LETTERS = "ABCD"


def demo_questions() -> list[dict[str, str]]:
    text = resources.files("conductor.data").joinpath("demo_questions.jsonl").read_text(encoding="utf-8")
    return [r for r in map(json.loads, text.splitlines()) if r["domain"] in {"math", "mcq"}]


def generated(domain: str, n: int, rng: random.Random) -> list[dict[str, str]]:
    out = []
    for i in range(n):
        a, b, c = rng.randint(12, 99), rng.randint(3, 19), rng.randint(2, 40)
        kind = i % 3
        if kind == 0:
            q, ans = f"What is {a} * {b}?", a * b
        elif kind == 1:
            q, ans = f"A shop sells pens at {b} dollars each. How many dollars do {c} pens cost?", b * c
        else:
            q, ans = f"Compute ({a} + {c}) * {b}.", (a + c) * b
        if domain == "math":
            out.append({"domain": "math", "question": q, "answer": str(ans)})
            continue
        options = list({ans, ans + rng.randint(1, 9), ans - rng.randint(1, 9), ans + 10 * rng.randint(1, 5)})
        while len(options) < 4:
            options.append(ans + 100 + len(options))
        rng.shuffle(options)
        body = "\n".join(f"{LETTERS[k]}) {v}" for k, v in enumerate(options[:4]))
        out.append({"domain": "mcq", "question": f"{q}\n{body}", "answer": LETTERS[options.index(ans)]})
    return out


def questions(per_domain: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    base = demo_questions()
    qs = []
    for domain in ("math", "mcq"):
        own = [r for r in base if r["domain"] == domain][:per_domain]
        qs += own + generated(domain, per_domain - len(own), rng)
    return qs


def judge(domain: str, response: str, gold: str) -> tuple[bool, bool]:
    """(marked, correct) by the verifier's own extractors."""
    if domain == "mcq":
        letters = extract_choice(response).letters
        return len(letters) == 1, letters == [gold]
    items = final_answers(response).items
    clean = [i.replace("$", "").replace(",", "").strip() for i in items]
    return bool(items), bool(clean) and len(set(clean)) == 1 and clean[-1] == gold


async def run(args: argparse.Namespace) -> tuple[dict[str, dict[str, float]], list[dict[str, object]]]:
    spec = WorkerSpec(
        name="vllm",
        provider="openai_compatible",
        model=args.model,
        base_url=args.url,
        max_tokens=args.max_tokens,
        temperature=0.2,
        top_p=0.8,
        top_k=20,
        timeout_s=900,
        concurrency=args.concurrency,
    )
    pool = Pool(workers=[spec])
    providers = build_providers(pool, {})
    adapter = WorkerAdapter(pool, providers)
    fmt = load_pool(Path(args.pool)).answer_format if args.pool else AnswerFormat()
    qs = questions(args.per_domain, args.seed)

    responses: list[dict[str, object]] = []

    async def ask(rec: dict[str, str], with_format: bool) -> tuple[str, bool, bool]:
        instruction = (
            fmt.for_step(rec["domain"], rec["question"], ANSWER, final=True) if with_format else None
        )
        reply = await adapter.call(
            WorkRequest(
                worker="vllm", messages=build_messages(rec["question"], ANSWER, [], answer_format=instruction)
            )
        )
        if reply.error is not None:
            raise RuntimeError(f"worker call failed: {reply.error.message}")
        verdict = judge(rec["domain"], reply.text, rec["answer"])
        responses.append({**rec, "instruction": instruction, "response": reply.text, "marked": verdict[0]})
        return (rec["domain"], *verdict)

    table: dict[str, dict[str, float]] = {}
    try:
        for label, with_format in (("before", False), ("after", True)):
            if args.only and args.only != label:
                continue
            rows = await asyncio.gather(*(ask(r, with_format) for r in qs))
            for domain in ("math", "mcq"):
                mine = [r for r in rows if r[0] == domain]
                table[f"{domain} {label}"] = {
                    "n": len(mine),
                    "marked": sum(r[1] for r in mine) / len(mine),
                    "correct": sum(r[2] for r in mine) / len(mine),
                }
    finally:
        await providers["openai_compatible"].aclose()
    return table, responses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--per-domain", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--pool", help="take the [answer_format] table (wording, scope) from this pool file")
    parser.add_argument("--only", choices=["before", "after"], help="run one side only")
    parser.add_argument("--dump", help="write every question, instruction and response to this JSONL file")
    args = parser.parse_args(argv)
    table, responses = asyncio.run(run(args))
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in responses)
    print(f"{'':12} {'n':>4} {'marked':>8} {'correct':>8}")
    for key, row in table.items():
        print(f"{key:12} {row['n']:>4} {row['marked']:>8.0%} {row['correct']:>8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
