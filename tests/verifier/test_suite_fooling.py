"""Fooling a same-process (BigCodeBench) suite from inside the candidate's process (issue 9 item 7): one wrong
program per attack class, each of which was scored ``correct: all tests passed`` before. Every one must now be
INCORRECT (never CORRECT, never a masked ERROR). The threat model is in services/verifier/README.md."""

from __future__ import annotations

import pytest
import pytest_asyncio

from schemas.verify import Outcome, UnittestReference, Verdict, VerifyRequest
from services.verifier.core import Verifier
from tests.verifier.conftest import sandbox_capable

pytestmark = pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")

SUITE = UnittestReference(
    test=(
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_value(self):\n        self.assertEqual(task_func(2), 4)\n"
        "    def test_list(self):\n        self.assertEqual(task_func(3), 6)\n"
    ),
    code_prompt="def task_func(x):\n",
    libs=[],
)
RECORD_SUITE = UnittestReference(
    test=(
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_total(self):\n        self.assertEqual(task_func(2).total, 4)\n"
        "    def test_label(self):\n        self.assertEqual(task_func(3).label, 'six')\n"
    ),
    code_prompt="def task_func(x):\n",
    libs=[],
)
CONTAINER_SUITE = UnittestReference(
    test=(
        "import unittest\n\nclass TestCases(unittest.TestCase):\n"
        "    def test_pairs(self):\n        self.assertEqual(task_func(2), {'double': 4})\n"
        "    def test_list(self):\n        self.assertEqual(task_func(3), [6])\n"
    ),
    code_prompt="def task_func(x):\n",
    libs=[],
)

ATTACKS: dict[str, tuple[UnittestReference, str]] = {
    "trusted_always_equal_sentinel": (
        SUITE,
        "from unittest import mock\ndef task_func(x):\n    return mock.ANY",
    ),
    "always_equal_in_a_defaultdict": (
        CONTAINER_SUITE,
        "import collections\nfrom unittest import mock\ndef task_func(x):\n"
        "    d = collections.defaultdict(list)\n    d['double'] = mock.ANY\n"
        "    return d if x == 2 else collections.UserList([mock.ANY])",
    ),
    "always_equal_in_a_list_subclass": (
        CONTAINER_SUITE,
        "class Plain(list):\n    pass\nclass Eq:\n    def __eq__(self, other):\n        return True\n"
        "class Holder(dict):\n    pass\n"
        "def task_func(x):\n    return Holder(double=Eq()) if x == 2 else Plain([Eq()])",
    ),
    "candidate_mock_built_around_the_tracker": (
        RECORD_SUITE,
        "import sys, unittest.mock as um\n"
        "judge = sys.modules.get('provenance') or sys.modules['unittest_harness']  # wherever the tracker lives\n"
        "def task_func(x):\n"
        "    m = um.MagicMock.__new__(um.MagicMock)\n    judge._mock_init(m)  # the original __init__: not tracked\n"
        "    m.total, m.label = 4, 'six'\n    return m",
    ),
    "entry_point_is_a_callable_object": (
        SUITE,
        "def task_func(x):\n    return 'wrong'\nclass Eq:\n    def __eq__(self, other):\n        return True\n"
        "class Rigged:\n    def __call__(self, x):\n        return Eq()\ntask_func = Rigged()",
    ),
    "assertion_code_object_swapped": (
        SUITE,
        "import unittest\nFAKE = next(\n"
        "    c for c in compile('def f(self, first, second, msg=None):\\n    pass', 'f', 'exec').co_consts\n"
        "    if type(c).__name__ == 'code'\n)\n"
        "def task_func(x):\n    unittest.TestCase.assertEqual.__code__ = FAKE\n    return 'wrong'",
    ),
    "assertion_rewritten_through_ctypes": (
        SUITE,
        "import ctypes, unittest\nFAKE = next(\n"
        "    c for c in compile('def f(self, first, second, msg=None):\\n    pass', 'f', 'exec').co_consts\n"
        "    if type(c).__name__ == 'code'\n)\n"
        "def task_func(x):\n    target = unittest.TestCase.__dict__['assertEqual']\n"
        "    new = ctypes.c_void_p(id(FAKE))  # func_code sits 48 bytes into a 3.11 function object\n"
        "    ctypes.memmove(id(target) + 48, ctypes.byref(new), 8)\n    return 'wrong'",
    ),
    "assertion_rewritten_through_proc_mem": (
        SUITE,
        "import unittest\nFAKE = next(\n"
        "    c for c in compile('def f(self, first, second, msg=None):\\n    pass', 'f', 'exec').co_consts\n"
        "    if type(c).__name__ == 'code'\n)\n"
        "def task_func(x):\n    target = unittest.TestCase.__dict__['assertEqual']\n"
        "    with open('/proc/self/mem', 'r+b', buffering=0) as mem:\n"
        "        mem.seek(id(target) + 48)\n        mem.write(id(FAKE).to_bytes(8, 'little'))\n    return 'wrong'",
    ),
}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def verdicts(verifier: Verifier) -> dict[str, Verdict]:
    requests = [
        VerifyRequest(id=name, response=f"```python\n{program}\n```", reference=ref)
        for name, (ref, program) in ATTACKS.items()
    ]
    return {v.id: v for v in await verifier.verify_batch(requests)}


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("name", list(ATTACKS))
async def test_suite_fooling_attack_is_incorrect(name: str, verdicts: dict[str, Verdict]) -> None:
    verdict = verdicts[name]
    assert verdict.outcome == Outcome.INCORRECT, f"{name}: {verdict.outcome} ({verdict.reason})"


@pytest.mark.asyncio(loop_scope="session")
async def test_honest_solutions_of_the_same_suites_still_pass(verifier: Verifier) -> None:
    honest = {
        "plain": (SUITE, "def task_func(x):\n    return 2 * x"),
        "record": (
            RECORD_SUITE,
            "import types\ndef task_func(x):\n    return types.SimpleNamespace(total=2 * x, label='six')",
        ),
        "containers": (
            CONTAINER_SUITE,
            "import collections\ndef task_func(x):\n"
            "    return collections.OrderedDict(double=4) if x == 2 else collections.UserList([6])",
        ),
    }
    requests = [
        VerifyRequest(id=name, response=f"```python\n{program}\n```", reference=ref)
        for name, (ref, program) in honest.items()
    ]
    for verdict in await verifier.verify_batch(requests):
        assert verdict.outcome == Outcome.CORRECT, f"{verdict.id}: {verdict.reason}"
