"""The workflow language on the completions real models write, and on every way they get it wrong."""

from __future__ import annotations

import time

import pytest

from conductor.workflow import (
    MAX_COMPLETION_CHARS,
    FormatReason,
    WorkflowFormatError,
    build_workflow,
    parse_completion,
    render_completion,
    validate_workflow,
)
from schemas.plan import Workflow

PAPER_FIGURE = """The task needs an algorithm first, then code. Model 2 is strongest at reasoning, Model 0 at code.

model_id = [2, 0]
subtasks = ["develop an efficient algorithm for the problem", "implement the algorithm above in Python"]
access_list = [[], ["all"]]
"""

TWO_STEPS = Workflow(
    model_id=[2, 0],
    subtasks=["develop an efficient algorithm for the problem", "implement the algorithm above in Python"],
    access_list=[[], "all"],
)

# (name, completion, expected model_id, expected access_list)
MESSY = [
    ("paper figure", PAPER_FIGURE, [2, 0], [[], "all"]),
    (
        "code fence + comments",
        '```python\nmodel_id = [1, 0]  # solver, checker\nsubtasks = [\n    "Solve it.",  # first\n    "Check it.",\n]\n'
        "access_list = [[], [all]]\n```",
        [1, 0],
        [[], "all"],
    ),
    ("bare all", 'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], all]', [0, 1], [[], "all"]),
    (
        "quoted all",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], "all"]',
        [0, 1],
        [[], "all"],
    ),
    (
        "upper ALL",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], ["ALL"]]',
        [0, 1],
        [[], "all"],
    ),
    (
        "[[all]]",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [["all"]]]',
        [0, 1],
        [[], "all"],
    ),
    (
        "[[]] none",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[[]], [["all"]]]',
        [0, 1],
        [[], "all"],
    ),
    ("single quotes", "model_id=[0,1]\nsubtasks=['a','b']\naccess_list=[[],['all']]", [0, 1], [[], "all"]),
    (
        "any order",
        'access_list = [[], [], ["all"]]\nsubtasks = ["x", "y", "z"]\nmodel_id = [3, 1, 0]',
        [3, 1, 0],
        [[], [], "all"],
    ),
    (
        "indices",
        'model_id = [0, 1, 2]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [0], [1, 0, 1]]',
        [0, 1, 2],
        [[], [0], [0, 1]],
    ),
    (
        "colon variant",
        'model_id: [0, 1]\nsubtasks: ["a", "b"]\naccess_list: [[], ["all"]]',
        [0, 1],
        [[], "all"],
    ),
    (
        "annotated",
        'model_id: list[int] = [0, 1]\nsubtasks: list[str] = ["a", "b"]\naccess_list: list = [[], ["all"]]',
        [0, 1],
        [[], "all"],
    ),
    (
        "json object",
        '{"model_id": [1, 2], "subtasks": ["a", "b"], "access_list": [[], ["all"]]}',
        [1, 2],
        [[], "all"],
    ),
    (
        "markdown bold names",
        '**model_id** = [1]\n**subtasks** = ["a"]\n**access_list** = [[]]',
        [1],
        [[]],
    ),
    (
        "value on next line",
        'model_id =\n[0]\nsubtasks =\n["a"]\naccess_list =\n[[]]',
        [0],
        [[]],
    ),
    (
        "plural/singular variants",
        'model_ids = [0]\nsubtask = ["a"]\naccess_lists = [[]]',
        [0],
        [[]],
    ),
    (
        "second attempt wins",
        'model_id = [0]\nsubtasks = ["a"]\naccess_list = [[]]\nWait, better:\n'
        'model_id = [1, 2]\nsubtasks = ["a", "b"]\naccess_list = [[], ["all"]]',
        [1, 2],
        [[], "all"],
    ),
    (
        "half-written later attempt ignored",
        'model_id = [0]\nsubtasks = ["a"]\naccess_list = [[]]\nMaybe model_id = [1, 2] instead... no.',
        [0],
        [[]],
    ),
    (
        "prose mention before lists",
        "Set model_id = [2] first? I will use two steps; subtasks: [see below].\n"
        'model_id = [2, 3]\nsubtasks = ["a", "b"]\naccess_list = [[], all]',
        [2, 3],
        [[], "all"],
    ),
    (
        "names inside subtask strings are not assignments",
        'model_id = [0]\nsubtasks = ["Write model_id = [9] and access_list = [[5]] in the docs"]\naccess_list = [[]]',
        [0],
        [[]],
    ),
    (
        "triple-quoted subtask",
        'model_id = [0]\nsubtasks = ["""Solve:\nx + 1 = 2"""]\naccess_list = [[]]',
        [0],
        [[]],
    ),
    (
        "think tags and trailing text",
        '<think>Two steps.</think>\nmodel_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], ["all"]]\n'
        "That should work.",
        [0, 1],
        [[], "all"],
    ),
    (
        "crlf line endings",
        'model_id = [0, 1]\r\nsubtasks = [\r\n "a",\r\n "b"\r\n]\r\naccess_list = [[], ["all"]]\r\n',
        [0, 1],
        [[], "all"],
    ),
    (
        "trailing commas and tuples inside",
        'model_id = [0, 1,]\nsubtasks = ["a", "b",]\naccess_list = [[], ["all",],]',
        [0, 1],
        [[], "all"],
    ),
]


@pytest.mark.parametrize(("name", "text", "ids", "access"), MESSY, ids=[m[0] for m in MESSY])
def test_messy_completions_parse(name: str, text: str, ids: list[int], access: list[object]) -> None:
    parsed = parse_completion(text, n_workers=4)
    assert parsed.workflow.model_id == ids
    assert parsed.workflow.access_list == access


def test_paper_figure_reasoning_and_workflow() -> None:
    parsed = parse_completion(PAPER_FIGURE, n_workers=3)
    assert parsed.workflow == TWO_STEPS
    assert parsed.reasoning.startswith("The task needs an algorithm first")
    assert "model_id" not in parsed.reasoning


def test_reasoning_drops_the_fence_opener() -> None:
    text = render_completion("Plan: two steps.", TWO_STEPS)
    assert parse_completion(text, n_workers=3).reasoning == "Plan: two steps."


# (name, completion, reason, parse kwargs)
BAD = [
    ("no lists", "I think the answer is 42.", FormatReason.MISSING_LISTS, {}),
    ("missing access", 'model_id = [0]\nsubtasks = ["a"]', FormatReason.INCOMPLETE, {}),
    (
        "length mismatch",
        'model_id = [0, 1]\nsubtasks = ["a"]\naccess_list = [[]]',
        FormatReason.LENGTH_MISMATCH,
        {},
    ),
    ("empty not allowed", "model_id = []\nsubtasks = []\naccess_list = []", FormatReason.EMPTY, {}),
    (
        "too many steps",
        "model_id = [0, 0, 0, 0, 0, 0]\nsubtasks = ['a', 'a', 'a', 'a', 'a', 'a']\naccess_list = [[], [], [], [], [], []]",
        FormatReason.TOO_MANY_STEPS,
        {},
    ),
    ("id out of pool", 'model_id = [4]\nsubtasks = ["a"]\naccess_list = [[]]', FormatReason.BAD_MODEL_ID, {}),
    ("negative id", 'model_id = [-1]\nsubtasks = ["a"]\naccess_list = [[]]', FormatReason.BAD_MODEL_ID, {}),
    ("bool id", 'model_id = [True]\nsubtasks = ["a"]\naccess_list = [[]]', FormatReason.BAD_MODEL_ID, {}),
    ("string id", 'model_id = ["0"]\nsubtasks = ["a"]\naccess_list = [[]]', FormatReason.BAD_MODEL_ID, {}),
    ("blank subtask", 'model_id = [0]\nsubtasks = ["  "]\naccess_list = [[]]', FormatReason.BAD_SUBTASK, {}),
    ("int subtask", "model_id = [0]\nsubtasks = [3]\naccess_list = [[]]", FormatReason.BAD_SUBTASK, {}),
    (
        "future access",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[1], []]',
        FormatReason.BAD_ACCESS,
        {},
    ),
    (
        "self access",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [1]]',
        FormatReason.BAD_ACCESS,
        {},
    ),
    ("none access", 'model_id = [0]\nsubtasks = ["a"]\naccess_list = [None]', FormatReason.BAD_ACCESS, {}),
    ("word access", 'model_id = [0]\nsubtasks = ["a"]\naccess_list = ["some"]', FormatReason.BAD_ACCESS, {}),
    (
        "mixed all and index",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], ["all", 0]]',
        FormatReason.BAD_ACCESS,
        {},
    ),
    (
        "expression, not literal",
        "model_id = [0] * 2\nsubtasks = ['a'] * 2\naccess_list = [[], []]",
        FormatReason.SYNTAX,
        {},
    ),
    ("unterminated", 'model_id = [0]\nsubtasks = ["a"\naccess_list = [[]', FormatReason.UNTERMINATED, {}),
    (
        "eval attempt",
        'model_id = [__import__("os").getpid()]\nsubtasks = ["a"]\naccess_list = [[]]',
        FormatReason.SYNTAX,
        {},
    ),
    (
        "too deep",
        "model_id = [0]\nsubtasks = ['a']\naccess_list = " + "[" * 50 + "]" * 50,
        FormatReason.TOO_DEEP,
        {},
    ),
    (
        "max_steps honoured",
        'model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], []]',
        FormatReason.TOO_MANY_STEPS,
        {"max_steps": 1},
    ),
]


@pytest.mark.parametrize(("name", "text", "reason", "kwargs"), BAD, ids=[b[0] for b in BAD])
def test_bad_completions_name_their_reason(name: str, text: str, reason: FormatReason, kwargs: dict) -> None:
    with pytest.raises(WorkflowFormatError) as info:
        parse_completion(text, n_workers=4, **kwargs)
    assert info.value.reason == reason
    assert str(info.value).startswith(f"{reason}: ")


def test_handback_needs_allow_empty() -> None:
    text = "Looks right already.\nmodel_id = []\nsubtasks = []\naccess_list = []"
    parsed = parse_completion(text, n_workers=3, allow_empty=True)
    assert len(parsed.workflow) == 0
    assert parsed.reasoning == "Looks right already."


def test_first_step_may_take_all() -> None:
    """On a recursion round step 0's "all" grants the previous final response, so it must parse."""
    parsed = parse_completion('model_id = [0]\nsubtasks = ["check it"]\naccess_list = [all]', n_workers=1)
    assert parsed.workflow.access_list == ["all"]


def test_validate_workflow_accepts_parsed_and_rejects_bad_structs() -> None:
    validate_workflow(TWO_STEPS, n_workers=3)
    with pytest.raises(WorkflowFormatError) as info:
        validate_workflow(TWO_STEPS, n_workers=2)
    assert info.value.reason == FormatReason.BAD_MODEL_ID
    unsorted = Workflow(model_id=[0, 0, 0], subtasks=["a", "b", "c"], access_list=[[], [], [1, 0]])
    with pytest.raises(WorkflowFormatError):
        validate_workflow(unsorted, n_workers=1)


def test_build_workflow_rejects_non_lists() -> None:
    with pytest.raises(WorkflowFormatError) as info:
        build_workflow((0,), ["a"], [[]], n_workers=1)
    assert info.value.reason == FormatReason.SYNTAX


@pytest.mark.parametrize(
    "text",
    [
        "x" * (MAX_COMPLETION_CHARS + 1),
        "model_id = [" * 5000,
        "model_id = [" + "[" * 100_000,
        "subtasks = ['" * 3000,
        'subtasks = ["""' * 3000,
        "access_list = [" + "-" * 30_000 + "1]",
        "model_id = [" + "9" * 5000 + "]\nsubtasks=['a']\naccess_list=[[]]",
        "model_id = [0" + ", 0" * 16_000 + "]",
        "model_id=[0]subtasks=['a']access_list=[[]]" * 1400,
        "model_id = [(" + "(" * 2000 + ")" * 2000 + ")]",
    ],
    ids=[
        "too long",
        "open brackets",
        "deep",
        "open strings",
        "open triple",
        "unary chain",
        "huge int",
        "long list",
        "many assignments",
        "deep parens",
    ],
)
def test_pathological_inputs_fail_fast_with_the_format_error(text: str) -> None:
    started = time.perf_counter()
    with pytest.raises(WorkflowFormatError):
        parse_completion(text, n_workers=2)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("tail", [".", ". Done.", "**", " - then stop", ",", ";", ")"])
def test_prose_after_a_list_is_not_an_expression(tail: str) -> None:
    text = f'model_id = [0]{tail}\nsubtasks = ["a"]{tail}\naccess_list = [[]]{tail}'
    assert parse_completion(text, n_workers=1).workflow.model_id == [0]
