"""Generated small code tasks: stdin/stdout programs and LeetCode-style ``Solution`` methods, with buggy twins.

A template is a parameterised statement, one correct program and a few buggy ones (off-by-one, wrong comparison,
wrong direction). Test cases are random inputs plus edge cases; expected outputs come from running the *correct
program itself* at generation time, so the statement, the program and the tests cannot drift apart. A buggy
program is kept only if it gets at least one test wrong (checked the same way), so every ``wrong[]`` program is
one the real code verifier must reject. Generation runs our own programs in-process; scoring never does — the
verifier runs workers' programs in its sandbox.
"""

from __future__ import annotations

import copy
import io
import json
import random
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout

import msgspec

from schemas.verify import FunctionalTestsReference, IOTest, StdioTestsReference
from tasks.sim.draft import Draft

STDIN_FORMAT = (
    "Write a complete Python 3 program that reads the input from standard input and prints the answer to standard "
    "output. Give the whole program in one ```python fenced code block."
)
"""LiveCodeBench-style instruction for stdin problems: one fenced program, stdin in, stdout out."""

FUNCTIONAL_FORMAT = (
    "Complete the starter code: write the whole class Solution, with the method implemented, in one ```python "
    "fenced code block."
)
"""LiveCodeBench-style instruction for LeetCode problems: the starter class completed in one fenced block."""

TESTS_PER_TASK = 7


class Template(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    params: tuple[int, ...]
    statement: Callable[[int], str]
    program: Callable[[int], str]
    bugs: Callable[[int], list[str]]
    inputs: Callable[[random.Random, int], list]  # stdin text, or (functional) a list of argument lists
    func: str = ""  # functional templates: the Solution method's name
    arg: str = "nums"  # functional templates: the method's one parameter


def _nums(rng: random.Random, lo: int = -50, hi: int = 50, n: int | None = None) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n if n is not None else rng.randint(1, 12))]


def _stdin(nums: list[int]) -> str:
    return f"{len(nums)}\n{' '.join(map(str, nums))}\n"


READ = "n = int(input())\nnums = list(map(int, input().split()))\n"
INPUT_SPEC = (
    "The first line holds an integer n (1 <= n <= 100); the second line holds n integers separated by spaces."
)


STDIN_TEMPLATES = (
    Template(
        name="sum_divisible",
        params=tuple(range(2, 60)),
        statement=lambda k: (
            f"{INPUT_SPEC} Print the sum of those integers that are divisible by {k} (0 if none)."
        ),
        program=lambda k: READ + f"print(sum(x for x in nums if x % {k} == 0))\n",
        bugs=lambda k: [
            READ + f"print(sum(x for x in nums if x % {k} != 0))\n",
            READ + f"print(sum(x for x in nums[1:] if x % {k} == 0))\n",
            READ + f"print(sum(1 for x in nums if x % {k} == 0))\n",
        ],
        inputs=lambda r, k: [_stdin(_nums(r)) for _ in range(TESTS_PER_TASK - 1)] + [_stdin([k, -k, 2 * k])],
    ),
    Template(
        name="count_greater",
        params=tuple(range(-30, 40)),
        statement=lambda k: f"{INPUT_SPEC} Print how many of the integers are strictly greater than {k}.",
        program=lambda k: READ + f"print(sum(1 for x in nums if x > {k}))\n",
        bugs=lambda k: [
            READ + f"print(sum(1 for x in nums if x >= {k}))\n",
            READ + f"print(sum(1 for x in nums if x < {k}))\n",
        ],
        inputs=lambda r, k: (
            [_stdin(_nums(r, -20, 30)) for _ in range(TESTS_PER_TASK - 1)] + [_stdin([k, k, k + 1])]
        ),
    ),
    Template(
        name="kth_smallest",
        params=tuple(range(1, 31)),
        statement=lambda k: (
            f"{INPUT_SPEC} It is guaranteed that n >= {k}. Print the {k}-th smallest of the integers "
            "(counting from 1, duplicates counted separately)."
        ),
        program=lambda k: READ + f"print(sorted(nums)[{k - 1}])\n",
        bugs=lambda k: [
            READ + f"print(sorted(nums)[{k}] if len(nums) > {k} else max(nums))\n",
            READ + f"print(sorted(nums, reverse=True)[{k - 1}])\n",
            READ + f"print(sorted(set(nums))[min({k - 1}, len(set(nums)) - 1)])\n",
        ],
        inputs=lambda r, k: [_stdin(_nums(r, -9, 9, r.randint(k, k + 8))) for _ in range(TESTS_PER_TASK)],
    ),
    Template(
        name="window_sum",
        params=tuple(range(2, 31)),
        statement=lambda k: (
            f"{INPUT_SPEC} It is guaranteed that n >= {k}. Print the largest sum of {k} consecutive integers."
        ),
        program=lambda k: READ + f"print(max(sum(nums[i:i + {k}]) for i in range(n - {k} + 1)))\n",
        bugs=lambda k: [
            READ + f"print(max(sum(nums[i:i + {k - 1}]) for i in range(n - {k} + 1)))\n",
            READ + f"print(max(sum(nums[i:i + {k}]) for i in range(n - {k})) if n > {k} else sum(nums))\n",
            READ + f"print(sum(sorted(nums)[-{k}:]))\n",
        ],
        inputs=lambda r, k: [_stdin(_nums(r, -30, 30, r.randint(k, k + 9))) for _ in range(TESTS_PER_TASK)],
    ),
    Template(
        name="rotate_left",
        params=tuple(range(1, 61)),
        statement=lambda k: (
            f"{INPUT_SPEC} Print the integers rotated left by {k} positions (the rotation wraps around as many "
            "times as needed), separated by single spaces."
        ),
        program=lambda k: READ + f"s = {k} % n\nprint(' '.join(map(str, nums[s:] + nums[:s])))\n",
        bugs=lambda k: [
            READ + f"s = {k} % n\nprint(' '.join(map(str, nums[-s:] + nums[:-s])))\n",
            READ + f"s = min({k}, n)\nprint(' '.join(map(str, nums[s:] + nums[:s])))\n",
        ],
        inputs=lambda r, k: [_stdin(_nums(r, 0, 99, r.randint(2, 14))) for _ in range(TESTS_PER_TASK)],
    ),
    Template(
        name="drop_every_kth",
        params=tuple(range(2, 41)),
        statement=lambda k: (
            "A single line holds a word of lowercase letters. Print the word with every "
            f"{k}-th character removed (positions counted from 1: remove positions {k}, {2 * k}, ...)."
        ),
        program=lambda k: f"w = input().strip()\nprint(''.join(c for i, c in enumerate(w, 1) if i % {k}))\n",
        bugs=lambda k: [
            f"w = input().strip()\nprint(''.join(c for i, c in enumerate(w) if i % {k}))\n",
            f"w = input().strip()\nprint(w[:{k - 1}] + w[{k}:])\n",
        ],
        inputs=lambda r, k: [
            "".join(r.choice("abcdefghij") for _ in range(r.randint(k, 3 * k + 5))) + "\n"
            for _ in range(TESTS_PER_TASK)
        ],
    ),
)

FUNCTIONAL_TEMPLATES = (
    Template(
        name="pairs_divisible",
        func="countPairs",
        params=tuple(range(2, 51)),
        statement=lambda k: (
            f"Given a list of integers nums, return the number of index pairs (i, j) with i < j such that "
            f"nums[i] + nums[j] is divisible by {k}."
        ),
        program=lambda k: (
            "class Solution:\n    def countPairs(self, nums):\n        n = len(nums)\n"
            f"        return sum(1 for i in range(n) for j in range(i + 1, n) if (nums[i] + nums[j]) % {k} == 0)\n"
        ),
        bugs=lambda k: [
            "class Solution:\n    def countPairs(self, nums):\n        n = len(nums)\n"
            f"        return sum(1 for i in range(n) for j in range(i, n) if (nums[i] + nums[j]) % {k} == 0)\n",
            "class Solution:\n    def countPairs(self, nums):\n        n = len(nums)\n"
            f"        return sum(1 for i in range(n) for j in range(n) if i != j and (nums[i] + nums[j]) % {k} == 0)\n",
        ],
        inputs=lambda r, k: [[_nums(r, 0, 40, r.randint(2, 12))] for _ in range(TESTS_PER_TASK)],
    ),
    Template(
        name="longest_run",
        func="longestRun",
        params=tuple(range(0, 50)),
        statement=lambda k: (
            "Given a list of integers nums, return the length of the longest contiguous subarray whose elements "
            f"are all at least {k} (0 if there is none)."
        ),
        program=lambda k: (
            "class Solution:\n    def longestRun(self, nums):\n        best = cur = 0\n        for x in nums:\n"
            f"            cur = cur + 1 if x >= {k} else 0\n            best = max(best, cur)\n        return best\n"
        ),
        bugs=lambda k: [
            "class Solution:\n    def longestRun(self, nums):\n        best = cur = 0\n        for x in nums:\n"
            f"            cur = cur + 1 if x > {k} else 0\n            best = max(best, cur)\n        return best\n",
            f"class Solution:\n    def longestRun(self, nums):\n        return sum(1 for x in nums if x >= {k})\n",
        ],
        inputs=lambda r, k: (
            [[_nums(r, k - 6, k + 6, r.randint(1, 14))] for _ in range(TESTS_PER_TASK - 1)]
            + [[[k, k, k - 1, k]]]
        ),
    ),
    Template(
        name="weighted_mod",
        func="weightedSum",
        params=tuple(range(7, 80)),
        statement=lambda m: (
            "Given a list of non-negative integers nums, return (1*nums[0] + 2*nums[1] + ... + n*nums[n-1]) "
            f"modulo {m}."
        ),
        program=lambda m: (
            "class Solution:\n    def weightedSum(self, nums):\n"
            f"        return sum((i + 1) * x for i, x in enumerate(nums)) % {m}\n"
        ),
        bugs=lambda m: [
            f"class Solution:\n    def weightedSum(self, nums):\n        return sum(i * x for i, x in enumerate(nums)) % {m}\n",
            f"class Solution:\n    def weightedSum(self, nums):\n        return sum((i + 1) * x for i, x in enumerate(nums)) % {m + 1}\n",
        ],
        inputs=lambda r, m: [[_nums(r, 0, 60, r.randint(1, 10))] for _ in range(TESTS_PER_TASK)],
    ),
    Template(
        name="caesar",
        func="shift",
        arg="s",
        params=tuple(range(1, 26)),
        statement=lambda k: (
            "Given a string s of lowercase letters, return it with every letter shifted forward by "
            f"{k} places in the alphabet, wrapping around from 'z' to 'a'."
        ),
        program=lambda k: (
            "class Solution:\n    def shift(self, s):\n"
            f"        return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) for c in s)\n"
        ),
        bugs=lambda k: [
            f"class Solution:\n    def shift(self, s):\n        return ''.join(chr(ord(c) + {k}) for c in s)\n",
            "class Solution:\n    def shift(self, s):\n"
            f"        return ''.join(chr((ord(c) - 97 - {k}) % 26 + 97) for c in s)\n",
        ],
        inputs=lambda r, k: (
            [
                ["".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(1, 12)))]
                for _ in range(TESTS_PER_TASK - 1)
            ]
            + [["xyz"]]
        ),
    ),
    Template(
        name="words_of_length",
        func="countWords",
        arg="words",
        params=tuple(range(1, 26)),
        statement=lambda k: (
            f"Given a list of strings words, return how many of them have exactly {k} characters."
        ),
        program=lambda k: (
            f"class Solution:\n    def countWords(self, words):\n        return sum(1 for w in words if len(w) == {k})\n"
        ),
        bugs=lambda k: [
            f"class Solution:\n    def countWords(self, words):\n        return sum(1 for w in words if len(w) >= {k})\n",
            f"class Solution:\n    def countWords(self, words):\n        return sum(1 for w in words if len(w) <= {k})\n",
        ],
        inputs=lambda r, k: (
            [
                [["ab" * r.randint(0, 3) + "c" * r.randint(0, k + 2) or "z" for _ in range(r.randint(1, 9))]]
                for _ in range(TESTS_PER_TASK - 1)
            ]
            + [[["a" * k, "a" * (k + 1), "a" * max(1, k - 1)]]]
        ),
    ),
)


def run_stdin(source: str, data: str) -> str:
    """Run one of *our* generation-time programs on ``data``; a crash is an output no test expects."""
    lines = iter(data.splitlines())
    out = io.StringIO()
    try:
        with redirect_stdout(out):
            exec(source, {"input": lambda *_: next(lines)})
    except Exception as exc:
        return f"<crashed: {type(exc).__name__}>"
    return out.getvalue()


def run_functional(source: str, func: str, args: list) -> str:
    env: dict = {}
    try:
        exec(source, env)
        return json.dumps(getattr(env["Solution"](), func)(*copy.deepcopy(args)))
    except Exception as exc:
        return f"<crashed: {type(exc).__name__}>"


def _build(t: Template, k: int, rng: random.Random) -> Draft | None:
    cases = t.inputs(rng, k)
    if t.func:
        run = lambda src, case: run_functional(src, t.func, case)  # noqa: E731
        encode = lambda case: "\n".join(json.dumps(a) for a in case)  # noqa: E731
    else:
        run, encode = run_stdin, (lambda case: case)
    program = t.program(k)
    expected = [run(program, c) for c in cases]
    if any(e.startswith("<crashed") for e in expected):
        raise AssertionError(f"sim code template {t.name}({k}): the correct program crashed")
    wrong = [b for b in t.bugs(k) if [run(b, c) for c in cases] != expected]
    if len(wrong) < 1:
        return None
    tests = [IOTest(input=encode(c), output=e) for c, e in zip(cases, expected, strict=True)]
    return Draft(
        key=f"{t.name}/{k}",
        domain="code",
        subject=t.name,
        question=_question(t, k, tests[0]),
        answer=program,
        wrong=wrong,
        reference=(
            FunctionalTestsReference(func_name=t.func, tests=tests, starter_code=_starter(t))
            if t.func
            else StdioTestsReference(tests=tests)
        ),
    )


def _starter(t: Template) -> str:
    return f"class Solution:\n    def {t.func}(self, {t.arg}):\n        pass\n"


def _question(t: Template, k: int, example: IOTest) -> str:
    if t.func:
        call = f"Solution().{t.func}({', '.join(example.input.splitlines())})"
        return (
            f"{t.statement(k)}\n\nExample: {call} returns {example.output}.\n\nStarter code:\n```python\n"
            f"{_starter(t)}```\n\n{FUNCTIONAL_FORMAT}"
        )
    return (
        f"{t.statement(k)}\n\nExample input:\n{example.input}\nExample output:\n{example.output}\n"
        f"{STDIN_FORMAT}"
    )


def generate(rng: random.Random) -> Iterator[Draft]:
    for t in (*STDIN_TEMPLATES, *FUNCTIONAL_TEMPLATES):
        for k in t.params:
            if (d := _build(t, k, rng)) is not None:
                yield d
