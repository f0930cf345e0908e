"""Code verdicts: turn a program and its benchmark tests into sandbox jobs, and judge the raw results outside.

Expected outputs stay here, on the host: stdin tests send only the input, functional tests only the arguments,
and the comparison below uses strict types. A verdict is all-or-nothing over every expected test, and the number of
tests that ran must equal the number expected. Whatever goes wrong on *our* side (a sandbox that died, our
deadline, a missing library the task needs) is an infrastructure error, never a failed test.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import math
import re
import sys
from decimal import Decimal, InvalidOperation

import msgspec

from schemas.errors import ErrorCode, ErrorInfo
from schemas.verify import (
    FunctionalTestsReference,
    HumanEvalReference,
    IOTest,
    Outcome,
    StdioTestsReference,
    UnittestReference,
)
from services.verifier.processes import ProcessError
from services.verifier.sandbox.client import Sandbox, SandboxRefused
from services.verifier.sandbox.runtime import values

# LiveCodeBench-style programs are written against an implicit import header; ours is written for the same effect.
PRELUDE = (
    "import sys, os, io, re, math, string, random, bisect, heapq, itertools, functools, operator, collections\n"
    "from typing import *\nfrom collections import *\nfrom itertools import *\nfrom functools import *\n"
    "from heapq import *\nfrom bisect import *\nfrom math import *\nsys.setrecursionlimit(10**6)\n"
)
FLOAT_TOLERANCE = (
    1e-6  # LeetCode accepts float answers within about this; exact float equality would be harsher
)
SIGNALS = {
    9: "killed (time, memory or output limit)",
    24: "CPU time limit exceeded",
    11: "segmentation fault",
    6: "aborted",
    25: "file size limit exceeded",
}


class CodeResult(msgspec.Struct, frozen=True, kw_only=True):
    outcome: Outcome
    reason: str
    passed: int | None = None
    total: int | None = None
    error: ErrorInfo | None = None


def infra(reason: str, detail: str | None = None, total: int | None = None) -> CodeResult:
    return CodeResult(
        outcome=Outcome.ERROR,
        reason=reason,
        total=total,
        error=ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message=reason, detail=detail, retryable=True),
    )


def bad_reference(reason: str) -> CodeResult:
    return CodeResult(
        outcome=Outcome.ERROR,
        reason=reason,
        error=ErrorInfo(code=ErrorCode.BAD_REQUEST, message=reason, field="reference"),
    )


def verdict(passed: int, total: int, failure: str | None) -> CodeResult:
    ok = failure is None and passed == total and total > 0
    reason = (
        f"all {total} tests passed" if ok else f"{passed}/{total} tests passed; {failure or 'incomplete'}"
    )
    return CodeResult(
        outcome=Outcome.CORRECT if ok else Outcome.INCORRECT, reason=reason, passed=passed, total=total
    )


# ---- program assembly ---------------------------------------------------------------------------------------------
def top_level_names(code: str) -> set[str] | None:
    """Names a program defines at module level; None when it does not parse on its own (it is a completion)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def humaneval_program(code: str, ref: HumanEvalReference) -> str:
    """A full solution defining the entry point runs after the prompt (so the prompt's helpers exist); a completion
    continues the prompt verbatim, exactly as the HumanEval harness concatenates them."""
    names = top_level_names(code)
    if names is not None and ref.entry_point in names:
        return ref.prompt + "\n" + code
    return ref.prompt + code


def unittest_program(code: str, ref: UnittestReference) -> str:
    names = top_level_names(code)
    if names is not None and ref.entry_point in names:
        return code
    return ref.code_prompt + code


# ---- comparison ---------------------------------------------------------------------------------------------------
def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").strip().split("\n")]
    return lines


def _token_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return Decimal(a) == Decimal(b)
    except (InvalidOperation, ValueError):
        return False


def stdout_matches(actual: str, expected: str) -> tuple[bool, str]:
    """Line by line after trimming trailing space; tokens that are numbers compare as exact decimals ("1.0" == "1")."""
    got, want = _lines(actual), _lines(expected)
    if got == want:
        return True, ""
    if len(got) != len(want):
        return False, f"expected {len(want)} lines, got {len(got)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt) or not all(_token_equal(x, y) for x, y in zip(gt, wt, strict=True)):
            return False, f"line {i + 1}: expected {w[:80]!r}, got {g[:80]!r}"
    return True, ""


def strict_equal(expected: object, actual: object) -> bool:
    """JSON-decoded expected vs decoded candidate value. ``True`` is not ``1``; an int is not a float unless the
    expected value is a float; a tuple may stand for a JSON list (JSON has no tuples); nothing else converts."""
    if type(expected) is bool or type(actual) is bool:
        return type(expected) is type(actual) and expected == actual
    if type(expected) is float:
        if type(actual) not in (int, float):
            return False
        if math.isnan(expected) or math.isnan(actual):  # type: ignore[arg-type]
            return False
        return math.isclose(expected, actual, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE)  # type: ignore[arg-type]
    if type(expected) is int:
        return type(actual) is int and expected == actual
    if type(expected) is str or expected is None:
        return type(actual) is type(expected) and expected == actual
    if type(expected) is list:
        return (
            type(actual) in (list, tuple)
            and len(actual) == len(expected)  # type: ignore[arg-type]
            and all(strict_equal(e, a) for e, a in zip(expected, actual, strict=True))
        )  # type: ignore[call-overload]
    if type(expected) is dict:
        return (
            type(actual) is dict
            and actual.keys() == expected.keys()  # type: ignore[union-attr]
            and all(strict_equal(expected[k], actual[k]) for k in expected)
        )  # type: ignore[index]
    return False


def describe_run(r: dict) -> str | None:
    """Why a sandbox run failed as a program (None when it ran to a clean exit)."""
    if r["status"] == "timeout":
        return "time limit exceeded"
    if r["status"] == "output_limit":
        return "output limit exceeded"
    if r["status"] == "memory_limit":
        return "memory limit exceeded"
    exit_ = r.get("exit") or {}
    if exit_.get("signal"):
        return SIGNALS.get(exit_["signal"], f"killed by signal {exit_['signal']}")
    if exit_.get("code"):
        tail = (r.get("stderr") or "").strip().splitlines()[-1:] or [""]
        return f"runtime error (exit {exit_['code']}): {tail[0][:200]}"
    return None


# ---- families -----------------------------------------------------------------------------------------------------
async def check_stdio(sb: Sandbox, code: str, ref: StdioTestsReference, timeout: float) -> CodeResult:
    tests = ref.tests
    if not tests:
        return bad_reference("the reference has no tests")
    passed, failure = 0, None
    try:
        async with sb.lease() as lease:
            for i, test in enumerate(tests):
                job = {
                    "op": "stdio",
                    "program": PRELUDE + code,
                    "stdin": test.input,
                    "limits": sb.limits(timeout),
                }
                r = await sb.run(lease, job, sb.wall(timeout))
                problem = describe_run(r)
                if problem is None:
                    ok, why = stdout_matches(r["stdout"], test.output)
                    problem = None if ok else f"wrong answer: {why}"
                if problem is None:
                    passed += 1
                    continue
                failure = failure or f"test {i + 1}: {problem}"
                if r["status"] != "ok":  # a killed run: the remaining tests would cost a timeout each
                    break
    except SandboxRefused as exc:
        return infra(str(exc), total=len(tests))
    except ProcessError as exc:
        return infra(f"sandbox failed: {exc}", total=len(tests))
    return verdict(passed, len(tests), failure)


def functional_args(test: IOTest) -> list[object]:
    return [json.loads(line) for line in test.input.split("\n") if line.strip()]


async def check_functional(
    sb: Sandbox, code: str, ref: FunctionalTestsReference, timeout: float
) -> CodeResult:
    tests = ref.tests
    if not tests:
        return bad_reference("the reference has no tests")
    try:
        calls = [values.to_tree(functional_args(t)) for t in tests]
        expected = [json.loads(t.output) for t in tests]
    except (ValueError, values.UnencodableValue) as exc:
        return bad_reference(f"functional test is not JSON: {exc}")
    names = top_level_names(code) or set()
    cls = "Solution" if "Solution" in names or ref.func_name not in names else None
    job = {
        "op": "call",
        "program": PRELUDE + code,
        "cls": cls,
        "name": ref.func_name,
        "calls": calls,
        "limits": {**sb.limits(timeout), "total": timeout * len(tests) + timeout},
    }
    try:
        async with sb.lease() as lease:
            r = await sb.run(lease, job, timeout * (len(tests) + 1))
    except SandboxRefused as exc:
        return infra(str(exc), total=len(tests))
    except ProcessError as exc:
        return infra(f"sandbox failed: {exc}", total=len(tests))
    if "load_error" in r["load"]:
        return verdict(0, len(tests), "program failed to load: " + ": ".join(r["load"]["load_error"])[:300])
    passed, failure = 0, None
    for i, want in enumerate(expected):
        reply = r["replies"][i] if i < len(r["replies"]) else None
        problem = _judge_reply(reply, want, r)
        if problem is None:
            passed += 1
        else:
            failure = failure or f"test {i + 1}: {problem}"
    return verdict(passed, len(tests), failure)


def _judge_reply(reply: dict | None, want: object, run: dict) -> str | None:
    if reply is None:
        return describe_run(run) or "no result (the program stopped answering)"
    if "raised" in reply:
        return f"raised {': '.join(reply['raised'])[:200]}"
    if "unencodable" in reply:
        return f"returned a value that is not plain data ({reply['unencodable'][:100]})"
    try:
        got = values.from_tree(reply.get("ok"))
    except values.MalformedValue as exc:
        return f"malformed result: {exc}"
    if strict_equal(want, got):
        return None
    return f"wrong answer: expected {json.dumps(want)[:80]}, got {values.dumps(got)[:80] if _small(got) else '...'}"


def _small(value: object) -> bool:
    try:
        return len(values.dumps(value)) < 10_000
    except values.UnencodableValue:
        return False


async def check_humaneval(sb: Sandbox, code: str, ref: HumanEvalReference, timeout: float) -> CodeResult:
    job = {
        "op": "humaneval",
        "program": humaneval_program(code, ref),
        "prompt": ref.prompt,
        "test": ref.test,
        "entry_point": ref.entry_point,
        "limits": sb.limits(timeout),
    }
    try:
        async with sb.lease() as lease:
            r = await sb.run(lease, job, timeout)
    except SandboxRefused as exc:
        return infra(str(exc), total=1)
    except ProcessError as exc:
        return infra(f"sandbox failed: {exc}", total=1)
    if r.get("harness"):
        return infra(r["error"], total=1)
    if r.get("passed") and r["status"] == "ok":
        return verdict(1, 1, None)
    problem = describe_run(r) if r["status"] != "ok" else None
    return verdict(0, 1, problem or r.get("error") or "check failed")


def expected_tests(test_source: str) -> list[str]:
    """``Class.method`` for every test method of every TestCase class in the suite, as unittest would collect them."""
    try:
        tree = ast.parse(test_source)
    except SyntaxError:
        return []
    found = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
        if not bases & {"TestCase", "IsolatedAsyncioTestCase"}:
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"):
                found.append(f"{node.name}.{item.name}")
    return found


@functools.lru_cache(maxsize=1024)
def library_available(name: str) -> bool:
    top = name.split(".")[0]
    if top in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def imported_libraries(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def missing_libraries(ref: UnittestReference) -> list[str]:
    """Libraries the *task* needs (declared, or imported by its tests or prompt) that this machine lacks."""
    wanted = [*ref.libs, *imported_libraries(ref.test), *imported_libraries(ref.code_prompt)]
    wanted = [re.split(r"[^\w.]", w.strip())[0] for w in wanted if w.strip()]
    return sorted({w for w in wanted if not library_available(w)})


# A test that errs because a host name does not resolve or no route exists needs the network the sandbox never
# gives. That is the task's environment, not the program: an error naming it (masked in training), never a score.
NETWORK_DOWN = re.compile(
    r"Name or service not known|Temporary failure in name resolution|Network is unreachable|"
    r"No address associated with hostname|nodename nor servname|Failed to resolve|getaddrinfo failed"
)


# Data a library loads at run time and the environment lacks (NLTK's corpora come from its downloader, never from
# PyPI): the task's environment again, named, never a score.
MISSING_DATA = re.compile(r"Resource '?([\w./-]+)'? not found\.\s+Please use the NLTK Downloader")


def needs_network(results: dict[str, str]) -> str | None:
    return next((v for v in results.values() if v != "pass" and NETWORK_DOWN.search(v)), None)


def missing_data(results: dict[str, str]) -> str | None:
    found = next((m for v in results.values() if v != "pass" and (m := MISSING_DATA.search(v))), None)
    return found.group(1) if found else None


async def check_unittest(sb: Sandbox, code: str, ref: UnittestReference, timeout: float) -> CodeResult:
    try:
        ast.parse(ref.test)
    except SyntaxError as exc:
        return bad_reference(f"the unittest reference's test does not parse: line {exc.lineno}: {exc.msg}")
    expected = expected_tests(ref.test)
    if not expected:
        return bad_reference("the unittest reference defines no test methods")
    missing = missing_libraries(ref)
    if missing:
        return infra(f"libraries the task needs are not installed: {', '.join(missing)}", total=len(expected))
    job = {
        "op": "unittest",
        "program": unittest_program(code, ref),
        "test": ref.test,
        "preload": imported_libraries(ref.test),
        "entry_point": ref.entry_point,
        "limits": sb.limits(timeout),
    }
    try:
        async with sb.lease() as lease:
            r = await sb.run(lease, job, timeout)
    except SandboxRefused as exc:
        return infra(str(exc), total=len(expected))
    except ProcessError as exc:
        return infra(f"sandbox failed: {exc}", total=len(expected))
    if r.get("tampered"):
        return verdict(0, len(expected), f"tampering detected: {r['tampered']}")
    results = r.get("results")
    if results is None:
        return verdict(
            0, len(expected), describe_run(r) or "the suite did not report (the program exited early)"
        )
    passed = sum(1 for name in expected if results.get(name) == "pass")
    offline = needs_network(results) if passed < len(expected) else None
    if offline:
        reason = f"the task needs the network, which the sandbox does not give: {offline}"
        info = ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message=reason, field="reference.test")
        return CodeResult(outcome=Outcome.ERROR, reason=reason, total=len(expected), error=info)
    data = missing_data(results) if passed < len(expected) else None
    if data:
        reason = f"the task needs NLTK data that is not installed here: {data} (nltk.download({data!r}))"
        info = ErrorInfo(code=ErrorCode.VERIFIER_ERROR, message=reason, field="reference.libs")
        return CodeResult(outcome=Outcome.ERROR, reason=reason, total=len(expected), error=info)
    if "<load>" in results:
        return verdict(0, len(expected), f"program failed to load: {results['<load>']}")
    failing = next(
        (f"{n}: {results.get(n, 'did not run')}" for n in expected if results.get(n) != "pass"), None
    )
    if failing is None and r["status"] != "ok":
        failing = describe_run(r)
    return verdict(passed, len(expected), failing)
