"""BigCodeBench records judged BigCodeBench's own way, without a sandbox: the reference the verifier must agree with.

BigCodeBench runs a solution and its test as ONE module: ``exec`` of ``program + test`` into a fresh module, then
``unittest`` over its ``TestCases`` class, in a temporary working directory; the record passes when no test fails or
errors. This module does exactly that in a child process (one per record, so a crash or a hang is that record's
alone) and reports the outcome and the child's peak resident memory. It runs untrusted code with no isolation at
all: use it on canonical solutions and our own mutants only, never on model output.

Also here: the two mutants the verifier's targets are measured with (``none_mutant``: the entry point returns
``None``; ``perturbed_mutant``: every result perturbed, type-preserving where it can be, data frames included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evaluation.mutants import mutate_completion
from tasks.registry import fixture_dir
from tasks.rows import read_rows

# 300 real BigCodeBench tasks (task_id, prompts, canonical solution, test, libs as released). Source: the public
# repository bigcode-project/bigcodebench-annotation, hf_data/BigCodeBench.jsonl.gz at commit
# a3b89850db670d7302571142b881e4f85eef18e3; license Apache-2.0. Chosen at random with a fixed seed (of 1,140).
SAMPLE = fixture_dir() / "bigcodebench_sample.jsonl.gz"

# The child: one module holding program and test, unittest over TestCases, one JSON line on the fd in argv[1].
_DRIVER = r"""
import io, json, os, sys, types, unittest
source = sys.stdin.read()
out = os.fdopen(int(sys.argv[1]), "w")
module = types.ModuleType("__bcb__")
sys.modules["__bcb__"] = module
try:
    exec(compile(source, "__bcb__.py", "exec"), module.__dict__)
except BaseException as exc:
    out.write(json.dumps({"passed": False, "problem": f"load: {type(exc).__name__}: {exc}"[:300]})); out.flush()
    os._exit(0)
cases = getattr(module, "TestCases", None)
if cases is None:
    out.write(json.dumps({"passed": False, "problem": "no TestCases class"})); out.flush()
    os._exit(0)
result = unittest.TestResult()
unittest.TestLoader().loadTestsFromTestCase(cases).run(result)
issues = result.failures + result.errors
problem = None
if issues:
    test, trace = issues[0]
    problem = f"{test.id().rsplit('.', 1)[-1]}: {trace.strip().splitlines()[-1]}"[:300]
out.write(json.dumps({"passed": not issues and result.testsRun > 0, "problem": problem, "ran": result.testsRun}))
out.flush()
os._exit(0)
"""


@dataclass(frozen=True)
class ReferenceRun:
    passed: bool
    problem: str | None
    seconds: float
    peak_rss_mb: float


def solution(record: dict) -> str:
    """The canonical program: the code prompt (imports, signature) followed by the canonical body."""
    return str(record["code_prompt"]) + str(record["canonical_solution"])


def run_reference(program: str, test: str, timeout: float = 120.0) -> ReferenceRun:
    """Run ``program + test`` as one module under ``unittest``, BigCodeBench's way, in a fresh child process."""
    read_fd, write_fd = os.pipe()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bcb-ref-") as work:
        env = {**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-c", _DRIVER, str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_fd,),
            cwd=work,
            env=env,
            start_new_session=True,
        )
        os.close(write_fd)
        try:
            assert proc.stdin is not None
            proc.stdin.write((program + "\n\n" + test).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        problem: str | None = None
        deadline = start + timeout
        rusage = None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, 9)
                _, status, rusage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)
                problem = f"timed out after {timeout:g} s"
                break
            time.sleep(0.02)
        with os.fdopen(read_fd) as pipe:
            raw = pipe.read()
    seconds = time.perf_counter() - start
    peak = rusage.ru_maxrss / 1024 if rusage else 0.0
    if problem:
        return ReferenceRun(False, problem, seconds, peak)
    try:
        report = json.loads(raw)
    except json.JSONDecodeError:
        return ReferenceRun(False, f"exited {proc.returncode} without a report", seconds, peak)
    return ReferenceRun(bool(report["passed"]), report.get("problem"), seconds, peak)


def none_mutant(program: str, entry_point: str = "task_func") -> str:
    """The program with its entry point replaced by one that returns ``None``."""
    return program.rstrip("\n") + f"\n\n\ndef {entry_point}(*args, **kwargs):\n    return None\n"


def perturbed_mutant(program: str, entry_point: str = "task_func") -> str:
    """The program whose entry point returns a perturbed result (an off-by-one, a row fewer, a flipped bool)."""
    return mutate_completion(program, entry_point)


def load_records(path: str | Path) -> list[dict]:
    return [dict(row) for row in read_rows(path)]
