"""Properties: rendering round-trips, and no text makes the parser raise anything but its format error."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.workflow import (
    MAX_STEPS,
    WorkflowFormatError,
    parse_completion,
    render_completion,
    render_workflow,
)
from schemas.plan import Access, Workflow

N_WORKERS = 7  # the paper's pool size (docs/method.md §7)


@st.composite
def workflows(draw: st.DrawFn, *, min_steps: int = 1) -> Workflow:
    n = draw(st.integers(min_steps, MAX_STEPS))
    access: list[Access] = []
    for i in range(n):
        earlier = st.lists(st.integers(0, i - 1), unique=True).map(sorted) if i else st.just([])
        access.append(draw(st.one_of(st.just("all"), st.just([]), earlier)))
    return Workflow(
        model_id=draw(st.lists(st.integers(0, N_WORKERS - 1), min_size=n, max_size=n)),
        subtasks=draw(st.lists(st.text(min_size=1).filter(str.strip), min_size=n, max_size=n)),
        access_list=access,
    )


reasoning = st.text().filter(lambda s: not any(k in s for k in ("model_id", "subtask", "access_list", "```")))


@given(workflows())
def test_parse_render_roundtrip(w: Workflow) -> None:
    assert parse_completion(render_workflow(w), n_workers=N_WORKERS).workflow == w


@given(reasoning, workflows(min_steps=0))
def test_parse_render_completion_roundtrip(text: str, w: Workflow) -> None:
    parsed = parse_completion(render_completion(text, w), n_workers=N_WORKERS, allow_empty=True)
    assert parsed.workflow == w
    assert parsed.reasoning == text.strip()


def _parse_or_format_error(text: str, **kwargs: object) -> None:
    try:
        parse_completion(text, n_workers=3, **kwargs)  # type: ignore[arg-type]
    except WorkflowFormatError:
        pass


@given(st.text(max_size=2000), st.booleans())
def test_arbitrary_text_raises_only_the_format_error(text: str, allow_empty: bool) -> None:
    _parse_or_format_error(text, allow_empty=allow_empty)


# Text built from the language's own pieces reaches deeper into the parser than random unicode does.
_PIECES = st.sampled_from(
    [
        "model_id",
        "subtasks",
        "access_list",
        "=",
        ":",
        " ",
        "\n",
        "[",
        "]",
        "(",
        ")",
        "{",
        "}",
        ",",
        "'",
        '"',
        '"""',
        "all",
        '"all"',
        "#",
        "\\",
        "0",
        "1",
        "-1",
        "7",
        "True",
        "None",
        "*",
        "```python",
        "```",
        "x",
        "1e400",
        "**",
    ]
)


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PIECES, max_size=80).map("".join))
def test_grammar_soup_raises_only_the_format_error(text: str) -> None:
    _parse_or_format_error(text, allow_empty=True)


@st.composite
def mutated_renderings(draw: st.DrawFn) -> str:
    text = render_completion(draw(reasoning), draw(workflows()))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        match draw(st.sampled_from(["delete", "insert", "duplicate"])):
            case "delete":
                text = text[:i] + text[i + draw(st.integers(1, 8)) :]
            case "insert":
                text = text[:i] + draw(st.one_of(_PIECES, st.text(max_size=4))) + text[i:]
            case "duplicate":
                text = text[:i] + text[i : i + draw(st.integers(1, 40))] + text[i:]
    return text


@given(mutated_renderings())
def test_mutated_renderings_raise_only_the_format_error(text: str) -> None:
    _parse_or_format_error(text)
