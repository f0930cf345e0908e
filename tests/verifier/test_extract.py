"""Answer extraction: thinking stripped, boxes balanced, answer tags, final-answer lines, last Python block."""

from __future__ import annotations

import pytest

from services.verifier.extract import final_answers, last_python_block, strip_thinking
from tasks.answers import boxed_all


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b", "b"),
        ("x<think>a</think>y<thinking>z</thinking>w", "xyw"),
        ("<think>never closed \\boxed{1}", ""),
        ("prompt opened it</think>answer", "answer"),
        ("<THINK>a</THINK>b", "b"),
        ("<reasoning>r</reasoning>ok", "ok"),
        ("plain", "plain"),
    ],
)
def test_strip_thinking(text: str, expected: str) -> None:
    assert strip_thinking(text) == expected


def test_boxed_nesting_and_order() -> None:
    assert boxed_all(r"\boxed{\frac{1}{2}} then \boxed{x^{2}} and \fbox{3}") == [r"\frac{1}{2}", "x^{2}", "3"]
    assert boxed_all(r"\boxed{\boxed{5}}") == [r"\boxed{5}"]
    assert boxed_all(r"\boxed {7}") == ["7"]
    assert boxed_all(r"\boxed{unclosed") == []
    assert boxed_all(r"\boxed{a\}b}") == [r"a\}b"]


def test_final_answer_sources() -> None:
    assert final_answers(r"so \boxed{1} and \boxed{2}").items == ["1", "2"]
    assert final_answers(r"<answer>\boxed{4}</answer> \boxed{9}").items == ["4", "9"]  # two answers, not one
    assert final_answers("<answer> 12 </answer>").source == "answer_tag"
    assert final_answers("Final answer: $\\frac12$.").items == ["\\frac12"]
    assert final_answers("The answer is 42").items == []
    assert final_answers(r"<think>\boxed{1}</think>no box").source == "none"


def test_last_python_block_rules() -> None:
    text = "```python\na = 1\n```\ntext\n```py\nb = 2\n```\n```\nplain\n```"
    assert last_python_block(text) == "b = 2\n"
    assert last_python_block("```\nx = 1\n```") == "x = 1\n"
    assert last_python_block("no fences\nprint(1)") == "no fences\nprint(1)"
    assert last_python_block("```python\ntruncated = True") == "truncated = True\n"
    assert last_python_block("<think>```python\nbad\n```</think>```python\ngood\n```") == "good\n"
    assert last_python_block("````python\nx = '```'\n````") == "x = '```'\n"
    assert last_python_block("```cpp\nint x;\n```\n```python\ny = 1\n```") == "y = 1\n"


def test_extraction_is_linear_on_adversarial_input() -> None:
    """Responses come from the policy under training: no input may make extraction hang (catastrophic backtracking)."""
    import time

    from services.verifier.mcq import extract_choice

    n = 200_000
    nasty = [
        "answer" + " " * n + "!",
        "answer:" + "*" * n,
        "Final answer: " + " " * n,
        "<answer>" * (n // 8),
        r"\boxed{" * (n // 7),
        "```python\n" * (n // 10),
        "`" * n,
        "the answer is (" + " " * n,
        " \n" * n,
    ]
    started = time.perf_counter()
    for text in nasty:
        extract_choice(text)
        final_answers(text)
        last_python_block(text)
    assert time.perf_counter() - started < 10
