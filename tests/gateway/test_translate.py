"""The pure translation between OpenAI's chat-completions shapes and the solve API."""

from __future__ import annotations

import msgspec
import pytest

from schemas.errors import ErrorCode, ErrorInfo
from schemas.solve import RoundRecord, SolveResult, StepRecord
from schemas.usage import Usage, UsageSummary
from services.gateway.errors import GatewayError, error_from
from services.gateway.protocol import ChatCompletionRequest
from services.gateway.translation import answer_pieces, completion, question_of, solve_request, strategy_for

WORKERS = ["sim-frontier", "sim-math"]


def req(**fields) -> ChatCompletionRequest:
    body = {"model": "conductor", "messages": [{"role": "user", "content": "What is 2+2?"}], **fields}
    return msgspec.convert(body, ChatCompletionRequest)


def test_single_user_message_is_the_question():
    assert solve_request(req(), WORKERS, "t1").question == "What is 2+2?"


def test_conversation_folds_into_one_question_with_instructions_first():
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "I have 3 apples."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": [{"type": "text", "text": "How many after eating one?"}]},
    ]
    q = question_of(req(messages=messages).messages)
    assert (
        q.index("Instructions:\nBe terse.") < q.index("User: I have 3 apples.") < q.index("Assistant: Noted.")
    )
    assert q.endswith("Current request:\nHow many after eating one?")


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "assistant", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": "   "}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content[0]"),
        ([], "messages"),
    ],
)
def test_unanswerable_conversations_name_the_field(messages, param):
    with pytest.raises(GatewayError) as err:
        solve_request(req(messages=messages), WORKERS, "t")
    assert (err.value.status, err.value.param) == (400, param)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"response_format": {"type": "json_object"}}, "response_format.type"),
    ],
)
def test_features_a_conductor_cannot_honour_are_refused_not_ignored(fields, param):
    with pytest.raises(GatewayError) as err:
        solve_request(req(**fields), WORKERS, "t")
    assert err.value.param == param


def test_model_picks_the_strategy():
    assert strategy_for("conductor", WORKERS).policy is None
    refine = strategy_for(
        "refine:3", WORKERS
    )  # the one grammar (conductor/strategy.py), as `conductor eval` reads it
    assert (refine.policy, refine.max_steps) == ("refine:3@0", 3)
    moa = strategy_for("moa", WORKERS)
    assert (moa.policy, moa.max_steps) == ("moa:7", 8)
    worker = strategy_for("sim-math", WORKERS)
    assert (worker.policy, worker.pool) == ("single", ["sim-math"])
    with pytest.raises(GatewayError) as err:
        strategy_for("gpt-4o", WORKERS)
    assert (err.value.status, err.value.code) == (404, "model_not_found")


def test_extra_body_options_reach_the_solve_request():
    s = solve_request(
        req(
            pool=["sim-math"],
            max_rounds=1,
            budget={"max_calls": 3},
            domain="math",
            stream=True,
            conductor_progress=True,
        ),
        WORKERS,
        "t9",
    )
    assert (s.pool, s.max_rounds, s.budget.max_calls, s.domain, s.progress, s.task_id) == (
        ["sim-math"],
        1,
        3,
        "math",
        True,
        "t9",
    )
    assert (
        solve_request(req(conductor_progress=True), WORKERS, "t").progress is False
    )  # only streams carry progress


def test_errors_map_to_openai_statuses():
    assert error_from(ErrorInfo(code=ErrorCode.BAD_REQUEST, message="x", field="pool[0]")).status == 400
    assert error_from(ErrorInfo(code=ErrorCode.BAD_REQUEST, message="x", field="pool[0]")).param == "pool[0]"
    down = error_from(ErrorInfo(code=ErrorCode.UNAVAILABLE, message="planner did not answer", retryable=True))
    assert (down.status, down.retry_after) == (503, 1)
    assert error_from(ErrorInfo(code=ErrorCode.BUDGET_EXCEEDED, message="x")).status == 422
    assert error_from(ErrorInfo(code=ErrorCode.WORKER_ERROR, message="x", retryable=True)).status == 502
    assert error_from(ErrorInfo(code=ErrorCode.INTERNAL, message="x")).status == 500
    assert error_from(ErrorInfo(code=ErrorCode.CANCELLED, message="x")).status == 409  # its client hung up


def test_completion_body_carries_usage_dollars_and_calls():
    result = SolveResult(
        task_id="abc",
        answer="4",
        workflows=[
            RoundRecord(
                round=0,
                policy="moa",
                steps=[StepRecord(index=0, model_id=0, worker="sim-math", subtask="s", access=[])],
            )
        ],
        usage=UsageSummary(total=Usage(input_tokens=10, output_tokens=5, cost_usd=0.25, calls=2)),
    )
    body = msgspec.to_builtins(completion(result, "conductor", created=7))
    assert body["choices"][0]["message"]["content"] == "4"
    assert body["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "cost_usd": 0.25,
        "calls": 2,
    }
    assert body["conductor"]["workers"] == ["sim-math"]


def test_answer_pieces_rejoin_exactly_and_end_on_spaces():
    text = "The answer is \\boxed{42} because " * 7
    pieces = answer_pieces(text, size=20)
    assert "".join(pieces) == text
    assert all(p.endswith(" ") for p in pieces[:-1])
    assert answer_pieces("x" * 50, size=20) == ["x" * 20, "x" * 20, "x" * 10]
