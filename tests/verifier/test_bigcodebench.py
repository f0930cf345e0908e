"""Real BigCodeBench records judged as BigCodeBench judges them (issue 20), with the hardening kept.

The reference is BigCodeBench's own way (``evaluation/bigcodebench.py``: program and test as one module under
``unittest``, no sandbox). The default tier runs a handful of real data-science records both ways and the cases
that once broke the same-process judge (library imports through ``ctypes``, library-made defaults, library objects
returned, names only the test imports); the ``slow`` tier (``make test-bigcodebench``) runs the whole shared sample
and asserts the issue's targets. The hostile programs stay in test_suite_fooling.py and test_hostile.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from evaluation.bigcodebench import (
    SAMPLE,
    load_records,
    none_mutant,
    perturbed_mutant,
    run_reference,
    solution,
)
from schemas.errors import ErrorCode
from schemas.verify import Outcome, UnittestReference, Verdict, VerifyRequest
from services.verifier import libraries
from services.verifier.core import Verifier
from tasks.datasets import bigcodebench_reference
from tests.verifier.conftest import make_settings, sandbox_capable

pytestmark = [
    pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap"),
    pytest.mark.asyncio(loop_scope="session"),
]

# Real records of the sample that pass BigCodeBench's way (with the dev extra's pandas, numpy, matplotlib, seaborn,
# scipy and scikit-learn): each failed through the verifier before (MemoryError at import, ctypes refused, defaults written
# by pyplot/seaborn, Axes distrusted, a name only the test imports).
DATA_SCIENCE = [
    "BigCodeBench/37",  # sklearn + seaborn; uses the ``pd`` only its test imports
    "BigCodeBench/42",  # PCA + pyplot; uses the ``np`` only its test imports
    "BigCodeBench/55",  # pandas imported by the program alone (numpy's ctypes import under candidate code)
    "BigCodeBench/57",  # seaborn heatmap (defaults written at import)
    "BigCodeBench/62",  # seaborn histplot, returns nothing
    "BigCodeBench/267",  # numpy, scipy and pyplot imported by the program alone
]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def bcb_verifier() -> AsyncIterator[Verifier]:
    """BigCodeBench's own time per task (its harness allows minutes): real data-science suites fit a random forest
    or draw seaborn plots, several seconds each on an idle core and more on a busy one; the suite-wide 20 s is for
    hostile programs."""
    async with Verifier(make_settings(CONDUCTOR_VERIFIER_UNITTEST_TIMEOUT_S="240")) as v:
        yield v


def unittest_request(rid: str, program: str, ref: UnittestReference) -> VerifyRequest:
    return VerifyRequest(id=rid, response=f"```python\n{program}\n```", reference=ref)


def load_failure(verdict: Verdict) -> bool:
    reason = verdict.reason or ""
    return any(s in reason for s in ("failed to load", "MemoryError", "tampering", "memory limit"))


def sample_records(ids: list[str] | None = None) -> list[dict]:
    records = load_records(SAMPLE)
    if ids is None:
        return records
    by_id = {r["task_id"]: r for r in records}
    return [by_id[i] for i in ids]


async def judge_both_ways(verifier: Verifier, records: list[dict]) -> list[tuple[str, str, bool, Verdict]]:
    """(task id, kind, passed BigCodeBench's way, our verdict) for the canonical solution and both mutants."""
    items = []
    for record in records:
        program, entry = solution(record), str(record.get("entry_point") or "task_func")
        for kind, prog in (
            ("canonical", program),
            ("none", none_mutant(program, entry)),
            ("perturbed", perturbed_mutant(program, entry)),
        ):
            items.append((record, kind, prog))
    references = [
        run_reference(prog, str(rec["test"])) for rec, _, prog in items
    ]  # one at a time, as BCB does
    requests = [
        unittest_request(f"{rec['task_id']}|{kind}", prog, bigcodebench_reference(rec))
        for rec, kind, prog in items
    ]
    verdicts = {v.id: v for v in await verifier.verify_batch(requests)}
    return [
        (str(rec["task_id"]), kind, ref.passed, verdicts[f"{rec['task_id']}|{kind}"])
        for (rec, kind, _), ref in zip(items, references, strict=True)
    ]


def assert_agreement(rows: list[tuple[str, str, bool, Verdict]], canonical_share: float) -> None:
    canonical = [(tid, v) for tid, kind, passed, v in rows if kind == "canonical" and passed]
    agreed = [tid for tid, v in canonical if v.outcome is Outcome.CORRECT]
    wrong = {tid: v.reason for tid, v in canonical if v.outcome is not Outcome.CORRECT}
    assert len(agreed) >= canonical_share * len(canonical), wrong
    for tid, kind, passed, verdict in rows:
        if kind == "canonical" or passed:
            continue
        # A mutant BigCodeBench's way fails: never correct, and failed by a test, not by a failure to load.
        assert verdict.outcome is not Outcome.CORRECT, (tid, kind, verdict.reason)
        if verdict.outcome is Outcome.INCORRECT:
            assert not load_failure(verdict), (tid, kind, verdict.reason)


async def test_real_data_science_records_are_judged_as_bigcodebench_judges_them(
    bcb_verifier: Verifier,
) -> None:
    rows = await judge_both_ways(bcb_verifier, sample_records(DATA_SCIENCE))
    regressed = [tid for tid, kind, passed, _ in rows if kind == "canonical" and not passed]
    assert not regressed, f"BigCodeBench's own way fails {regressed}: the reference environment regressed"
    assert_agreement(rows, canonical_share=1.0)
    mutants = [v for _, kind, passed, v in rows if kind != "canonical" and not passed]
    assert (
        len(mutants) >= 2 * len(DATA_SCIENCE) - 2
    )  # the rare mutant a suite cannot see is allowed, not more
    assert all(v.outcome is Outcome.INCORRECT for v in mutants), [v.reason for v in mutants]


SMALL = UnittestReference(
    test=(
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_value(self):\n        self.assertEqual(task_func(2), 4)\n"
    ),
    code_prompt="def task_func(x):\n",
    libs=[],
)


async def test_library_objects_and_library_made_functions_are_not_distrusted(verifier: Verifier) -> None:
    """Library types override dunders (a lock's ``__repr__``, ``itertools.count``'s ``__getattribute__``), and
    ``namedtuple(defaults=...)`` writes ``__defaults__`` while candidate code runs: none of it is tampering."""
    test = (
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_objects(self):\n        counter, lock, method, point = task_func()\n"
        "        self.assertEqual(next(counter), 5)\n        self.assertTrue(hasattr(lock, 'acquire'))\n"
        "        self.assertEqual(method(), 'AB')\n        self.assertEqual(point.y, 7)\n"
    )
    program = (
        "import itertools, threading, collections\n"
        "def task_func():\n"
        "    Point = collections.namedtuple('Point', 'x y', defaults=(7,))\n"
        "    return itertools.count(5), threading.Lock(), 'ab'.upper, Point(1)\n"
    )
    ref = UnittestReference(test=test, code_prompt="", libs=[])
    verdict = (await verifier.verify_batch([unittest_request("objects", program, ref)]))[0]
    assert verdict.outcome is Outcome.CORRECT, verdict.reason


@pytest.mark.parametrize(
    ("program", "named"),
    [
        pytest.param(  # a candidate-made class that lies is still refused before any of its code runs
            "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
            "def task_func(x):\n    return Yes()\n",
            "overrides __eq__",
            id="candidate-class-eq",
        ),
        pytest.param(  # library-made writes are allowed; the candidate's own write into a library function is not
            "import json\ndef task_func(x):\n    json.dumps.__kwdefaults__ = {'sort_keys': True}\n    return x * 2\n",
            "__kwdefaults__",
            id="library-function-defaults",
        ),
        pytest.param(  # nor a library class whose comparison it replaced with its own code
            "import fractions\ndef task_func(x):\n    fractions.Fraction.__eq__ = lambda s, o: True\n"
            "    return fractions.Fraction(x * 2)\n",
            "Fraction overrides __eq__",
            id="library-class-eq",
        ),
    ],
)
async def test_what_the_candidate_itself_does_is_still_refused(
    verifier: Verifier, program: str, named: str
) -> None:
    verdict = (await verifier.verify_batch([unittest_request("refused", program, SMALL)]))[0]
    assert verdict.outcome is Outcome.INCORRECT
    assert named in verdict.reason, verdict.reason


async def test_numpy_imported_by_the_candidate_alone_loads(verifier: Verifier) -> None:
    """numpy loads its native parts through ctypes at import: refused before, when candidate code imported it."""
    program = "import numpy as np\ndef task_func(x):\n    return int(np.int64(x) * 2)\n"
    verdict = (await verifier.verify_batch([unittest_request("numpy", program, SMALL)]))[0]
    assert verdict.outcome is Outcome.CORRECT, verdict.reason


async def test_bad_records_get_typed_verdicts_and_never_sink_the_batch(verifier: Verifier) -> None:
    broken_test = UnittestReference(test="import unittest\nclass TestCases(unittest.TestCase:\n", libs=[])
    missing = UnittestReference(
        test=SMALL.test.replace("import unittest", "import unittest\nimport surely_missing_lib_xyz"), libs=[]
    )
    network = UnittestReference(
        test=SMALL.test.replace(
            "self.assertEqual(task_func(2), 4)",
            "import socket\n        socket.getaddrinfo('example.com', 80)\n        self.assertEqual(task_func(2), 4)",
        ),
        libs=[],
    )
    corpus = UnittestReference(  # what nltk raises for a corpus its downloader never fetched
        test=SMALL.test.replace(
            "self.assertEqual(task_func(2), 4)",
            "raise LookupError(\"\\n****\\n  Resource 'stopwords' not found.\\n  Please use the NLTK Downloader\")",
        ),
        libs=[],
    )
    requests = [
        unittest_request("corpus", "def task_func(x):\n    return x * 2\n", corpus),
        unittest_request("syntax", "def task_func(x):\n    return x * 2\n", broken_test),
        unittest_request("empty", "def task_func(x):\n", SMALL),
        unittest_request("missing", "def task_func(x):\n    return x * 2\n", missing),
        unittest_request("network", "def task_func(x):\n    return x * 2\n", network),
        unittest_request("hang", "def task_func(x):\n    while True:\n        pass\n", SMALL),
        unittest_request("good", "def task_func(x):\n    return x * 2\n", SMALL),
    ]
    verdicts = {v.id: v for v in await verifier.verify_batch(requests)}
    assert verdicts["syntax"].outcome is Outcome.ERROR
    assert verdicts["syntax"].error.code is ErrorCode.BAD_REQUEST and "line 2" in verdicts["syntax"].reason
    assert verdicts["empty"].outcome is Outcome.INCORRECT and "failed to load" in verdicts["empty"].reason
    assert (
        verdicts["missing"].outcome is Outcome.ERROR
        and "surely_missing_lib_xyz" in verdicts["missing"].reason
    )
    assert verdicts["network"].outcome is Outcome.ERROR and "network" in verdicts["network"].reason
    assert verdicts["hang"].outcome is Outcome.INCORRECT and "time limit" in verdicts["hang"].reason
    assert verdicts["corpus"].outcome is Outcome.ERROR and "NLTK data" in verdicts["corpus"].reason
    assert "stopwords" in verdicts["corpus"].reason
    assert verdicts["good"].outcome is Outcome.CORRECT, verdicts["good"].reason


async def test_the_declared_libraries_are_reported_by_name() -> None:
    found, missing = libraries.report(["json", "surely_missing_lib_xyz"])
    assert found == ["json"] and missing == ["surely_missing_lib_xyz"]
    assert "benchmark libraries (bigcodebench):" in libraries.describe()
    for name in ("pandas", "numpy", "matplotlib", "sklearn", "scipy", "seaborn"):  # the dev extra's share
        assert libraries.importable(name), name


@pytest.mark.slow
async def test_the_whole_shared_sample_meets_the_targets(bcb_verifier: Verifier) -> None:
    """Issue 20's targets on all 300 records (make test-bigcodebench; needs the bigcodebench extra)."""
    rows = await judge_both_ways(bcb_verifier, sample_records())
    assert_agreement(rows, canonical_share=0.98)
    for tid, _, _, verdict in rows:
        assert verdict.outcome is not Outcome.ERROR or verdict.error is not None, tid
