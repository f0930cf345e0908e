"""Malformed ``SolveRequest`` payloads for the fuzz tests, invalid by construction.

Every payload must be rejected: a payload that happened to be a valid request would start a real task, so each
generator breaks something the schema or the executor's validation is sure to refuse (no random byte flips inside
a valid request). ``expect`` is the field the typed error should name, when the generator knows it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

FIELDS = [
    "question",
    "task_id",
    "pool",
    "max_steps",
    "max_rounds",
    "domain",
    "reference",
    "policy",
    "budget",
    "cache",
]
BUDGET = ["max_calls", "max_tokens", "max_cost_usd", "max_wall_s"]
JUNK = [5, -1, 1.5, True, None, [], {}, [1, "a"], {"a": 1}, "", "x"]


@dataclass(frozen=True)
class Payload:
    kind: str
    data: bytes
    expect: str | None = None  # the field the error should name; None: not checked


def _j(obj: object) -> bytes:
    return json.dumps(obj).encode()


def random_bytes(rng: random.Random, limit: int) -> Payload:
    return Payload("random_bytes", rng.randbytes(rng.choice([0, 1, 2, 16, 256, 4096])))


def invalid_utf8(rng: random.Random, limit: int) -> Payload:
    bad = rng.choice(
        [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]
    )
    where = rng.choice(["question", "key", "task_id", "bare"])
    if where == "question":
        data = b'{"question": "caf' + bad + b'"}'
    elif where == "key":
        data = b'{"quest' + bad + b'ion": "q"}'
    elif where == "task_id":
        data = b'{"question": "q", "task_id": "t' + bad + b'"}'
    else:
        data = b"{" + bad + b"}"
    return Payload("invalid_utf8", data)


def wrong_type(rng: random.Random, limit: int) -> Payload:
    name = rng.choice(FIELDS)
    wrong: dict[str, list[object]] = {
        "question": [5, 1.5, True, None, [], {}, ["a"]],
        "task_id": [5, [], {}, True],
        "pool": ["sim-math", 5, {}, [1, 2], [None], True],
        "max_steps": ["3", 1.5, [], {}, True],
        "max_rounds": ["1", 0.5, None, [], True],
        "domain": [5, [], {}],
        "reference": [5, [], True, {"kind": "nonsense"}, {"answer": 5}],
        "policy": [5, [], {}],
        "budget": ["cheap", 5, [], {"max_calls": "x"}, {"max_cost_usd": "free"}],
        "cache": ["yes", 1, [], {}],
    }
    value = rng.choice(wrong[name])
    expect: str | None = name
    if name == "budget" and isinstance(value, dict):
        expect = f"budget.{next(iter(value))}"
    if name == "pool" and isinstance(value, list):
        expect = "pool[0]"  # a list of the wrong element type: msgspec names the element
    if name == "reference" and isinstance(value, dict):
        expect = None  # a tagged union: msgspec names the tag or the member field
    return Payload("wrong_type", _j({"question": "q", name: value}), expect)


def not_an_object(rng: random.Random, limit: int) -> Payload:
    return Payload(
        "not_an_object", _j(rng.choice([[], [1, 2], 5, -3.5, "question", None, True, [{"question": "q"}]]))
    )


def wrong_shape(rng: random.Random, limit: int) -> Payload:
    """Valid JSON objects of random shape without a usable question."""
    obj = {rng.choice([*FIELDS, "Question", "q", "input", "prompt"]): _random_json(rng, 3) for _ in range(4)}
    obj.pop("question", None)
    if rng.random() < 0.5:
        obj["question"] = rng.choice([5, None, [], {}, "", "   ", "\n\t"])
    return Payload("wrong_shape", _j(obj))


def unknown_workers(rng: random.Random, limit: int) -> Payload:
    known = ["sim-frontier", "sim-math", "sim-knowledge", "sim-small"]
    pool = rng.sample(known, rng.randint(0, 3))
    bad = rng.choice(
        ["gpt-99", "", "SIM-MATH", "sim-math ", "../etc", "x" * rng.randint(1, 300), "\u0000", "模型"]
    )
    i = rng.randint(0, len(pool))
    pool.insert(i, bad)
    return Payload("unknown_workers", _j({"question": "q", "pool": pool}), f"pool[{i}]")


def bad_numbers(rng: random.Random, limit: int) -> Payload:
    choice = rng.choice(["max_steps", "max_rounds", "budget"])
    if choice == "budget":
        field = rng.choice(BUDGET)
        value = (
            rng.choice([0, -1, -(2**31), -1e-9, -1e308])
            if field in {"max_cost_usd", "max_wall_s"}
            else rng.choice([0, -1, -(2**63)])
        )
        return Payload("bad_numbers", _j({"question": "q", "budget": {field: value}}), f"budget.{field}")
    value = rng.choice(
        [0, -1, -(2**63), 11, 10**6, 2**63 - 1] if choice == "max_steps" else [-1, 5, 99, -(2**40)]
    )
    return Payload("bad_numbers", _j({"question": "q", choice: value}), choice)


def huge_numbers(rng: random.Random, limit: int) -> Payload:
    """Integers beyond 64 bits and floats beyond double range: the decoder must refuse, not crash."""
    text = rng.choice([b"1" * 40, b"-" + b"9" * 400, b"1e400", b"-1e999"])
    field = rng.choice([b"max_steps", b"max_rounds"])
    return Payload("huge_numbers", b'{"question": "q", "' + field + b'": ' + text + b"}", None)


def bad_task_id(rng: random.Random, limit: int) -> Payload:
    tid = rng.choice(
        [
            "",
            "a b",
            "a..b",
            "x" * 129,
            "a/b",
            "a*",
            "a>",
            "t\u00e9",
            "\u0000",
            "..",
            "a\nb",
            ".a",
            "a.",
            "\u0663",
        ]
    )
    return Payload("bad_task_id", _j({"question": "q", "task_id": tid}), "task_id")


def blank_question(rng: random.Random, limit: int) -> Payload:
    return Payload(
        "blank_question", _j({"question": rng.choice(["", " ", "\n\t ", "\u3000" * 3])}), "question"
    )


def deep_nesting(rng: random.Random, limit: int) -> Payload:
    depth = rng.choice([64, 1000, 10_000, 100_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}")])
    nested = opener * depth + b"0" + closer * depth
    where = rng.choice(["question", "unknown_field", "top"])
    if where == "question":
        data = b'{"question": ' + nested + b"}"
    elif where == "unknown_field":
        data = b'{"question": "", "extra": ' + nested + b"}"
    else:
        data = nested
    return Payload("deep_nesting", data[: limit - 1] if len(data) >= limit else data)


def truncated(rng: random.Random, limit: int) -> Payload:
    """A valid request cut short: never valid JSON."""
    full = _j(
        {"question": "What is 2 + 2?", "pool": ["sim-math"], "max_steps": 3, "budget": {"max_calls": 4}}
    )
    return Payload("truncated", full[: rng.randint(0, len(full) - 1)])


def huge_within(rng: random.Random, limit: int) -> Payload:
    """Close to, but under, the configured max payload; invalid by content."""
    n = rng.randint(limit // 2, limit - 200)
    kind = rng.choice(["question", "pool", "unknown_field"])
    if kind == "question":  # over the executor's max_question_chars (100k), else blank
        return Payload("huge_within", _j({"question": ("x" if n > 100_000 else " ") * n}), "question")
    if kind == "pool":
        return Payload("huge_within", _j({"question": "q", "pool": ["w" * 50] * (n // 60)}), "pool[0]")
    return Payload("huge_within", _j({"question": "", "extra": "y" * n}), "question")


def huge_over(rng: random.Random, limit: int) -> Payload:
    """Over the configured max payload (payload_too_large) or over NATS' own max_payload (refused by the server)."""
    n = rng.choice([limit + 1, limit + rng.randint(2, limit), 1_048_576 + 10])
    body = b'{"question": "' + b"z" * n + b'"}'
    return Payload("huge_over", body)


GENERATORS: list[tuple[Callable[[random.Random, int], Payload], float]] = [
    (random_bytes, 12),
    (invalid_utf8, 10),
    (wrong_type, 14),
    (not_an_object, 4),
    (wrong_shape, 10),
    (unknown_workers, 8),
    (bad_numbers, 10),
    (huge_numbers, 3),
    (bad_task_id, 6),
    (blank_question, 3),
    (deep_nesting, 6),
    (truncated, 8),
    (huge_within, 1.5),
    (huge_over, 1),
]


def payloads(n: int, *, seed: int, limit: int) -> list[Payload]:
    """``n`` malformed payloads, reproducible from ``seed``; ``limit`` is the services' max payload in bytes."""
    rng = random.Random(seed)
    gens, weights = zip(*GENERATORS, strict=True)
    return [rng.choices(gens, weights)[0](rng, limit) for _ in range(n)]


def _random_json(rng: random.Random, depth: int) -> object:
    if depth == 0 or rng.random() < 0.4:
        return rng.choice([*JUNK, rng.random(), rng.randint(-(2**40), 2**40), "s" * rng.randint(0, 20)])
    if rng.random() < 0.5:
        return [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {str(rng.randint(0, 9)): _random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))}
