"""Pure parts of code checking: strict comparison, stdout matching, program assembly, test and library discovery."""

from __future__ import annotations

import pytest

from schemas.verify import HumanEvalReference, UnittestReference
from services.verifier.codecheck import (
    expected_tests,
    humaneval_program,
    missing_libraries,
    stdout_matches,
    strict_equal,
    unittest_program,
)


@pytest.mark.parametrize(
    ("expected", "actual", "equal"),
    [
        (1, 1, True),
        (1, True, False),
        (True, 1, False),
        (True, True, True),
        (1, 1.0, False),
        (1.5, 1.5, True),
        (1.0, 1, True),
        (0.1 + 0.2, 0.3, True),
        (1.0, 1.1, False),
        ([1, 2], (1, 2), True),
        ([1, 2], [2, 1], False),
        ([1, 2], {1, 2}, False),
        ("a", "a", True),
        ("1", 1, False),
        (None, None, True),
        (None, 0, False),
        ({"a": [1]}, {"a": (1,)}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ([[1], [2]], [(1,), [2]], True),
        (float("nan"), float("nan"), False),
        ([], "", False),
    ],
)
def test_strict_equal(expected: object, actual: object, equal: bool) -> None:
    assert strict_equal(expected, actual) is equal


@pytest.mark.parametrize(
    ("actual", "expected", "ok"),
    [
        ("6\n", "6\n", True),
        ("6", "6\n", True),
        ("6  \n\n", "6\n", True),
        ("1 2\r\n3\n", "1 2\n3\n", True),
        ("1.0\n", "1\n", True),
        ("1.50\n", "1.5\n", True),
        ("7\n", "6\n", False),
        ("6\n6\n", "6\n", False),
        ("1  2\n", "1 2\n", True),
        ("yes\n", "Yes\n", False),
        ("1e3\n", "1000\n", True),
        ("0.333\n", "0.3333\n", False),
    ],
)
def test_stdout_matches(actual: str, expected: str, ok: bool) -> None:
    assert stdout_matches(actual, expected)[0] is ok


def test_program_assembly() -> None:
    ref = HumanEvalReference(prompt="def f(x):\n    '''doc'''\n", test="", entry_point="f")
    assert humaneval_program("    return x\n", ref) == ref.prompt + "    return x\n"
    assert humaneval_program("def f(x):\n    return x", ref).startswith(ref.prompt + "\n")
    bcb = UnittestReference(test="", code_prompt="import os\ndef task_func():\n")
    assert unittest_program("    return 1\n", bcb) == "import os\ndef task_func():\n    return 1\n"
    assert unittest_program("def task_func():\n    return 1\n", bcb) == "def task_func():\n    return 1\n"


def test_expected_tests_and_missing_libraries() -> None:
    source = (
        "import unittest\nimport numpy\nclass TestCases(unittest.TestCase):\n    def test_a(self): pass\n"
        "    def helper(self): pass\n    def test_b(self): pass\nclass Other:\n    def test_c(self): pass\n"
    )
    assert expected_tests(source) == ["TestCases.test_a", "TestCases.test_b"]
    ref = UnittestReference(
        test=source,
        libs=["numpy", "no_such_library_xyz", "collections"],
        code_prompt="import another_missing_lib\n",
    )
    assert missing_libraries(ref) == ["another_missing_lib", "no_such_library_xyz"]
