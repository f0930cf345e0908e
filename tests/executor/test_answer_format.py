"""The executor's worker messages carry the pool's answer-format instruction for the task's domain: on this step's
own turn, once, firm on the last step and conditional before it, and not when the question already asks."""

from __future__ import annotations

import msgspec

from conductor.answer_format import DEFAULT_FORMATS, AnswerFormat
from conductor.pool import load_pool
from conductor.settings import CommonSettings
from schemas.plan import Workflow
from schemas.solve import SolveRequest
from services.executor.config import ExecutorSettings
from services.executor.core import Executor
from services.executor.messages import build_messages
from tests.executor.fakes import ScriptedTransport

POOL = load_pool(None)
SETTINGS = ExecutorSettings(common=CommonSettings())
MATH = DEFAULT_FORMATS["math"]
TWO_STEPS = Workflow(model_id=[0, 1], subtasks=["Solve it.", "Give the answer."], access_list=[[], "all"])


async def _solve(question: str, domain: str | None, pool=POOL, workflows=None) -> ScriptedTransport:
    t = ScriptedTransport(workflows or [TWO_STEPS])
    res = await Executor(pool, SETTINGS, t).solve(SolveRequest(question=question, domain=domain))
    assert res.error is None
    return t


def _all_text(t: ScriptedTransport, step: int) -> str:
    return "\n".join(m.content for m in t.work_requests[step].messages)


def test_build_messages_puts_the_instruction_on_this_steps_turn_only():
    msgs = build_messages("Q", "final", [("s0", "r0")], answer_format="FORMAT")
    assert [(m.role, m.content) for m in msgs] == [
        ("user", "Q\n\ns0"),
        ("assistant", "r0"),
        ("user", "final\n\nFORMAT"),
    ]
    assert build_messages("Q", "do it", [], answer_format="FORMAT")[0].content == "Q\n\ndo it\n\nFORMAT"
    assert build_messages("Q", "do it", [], answer_format=None) == build_messages("Q", "do it", [])


async def test_math_task_instruction_reaches_each_worker_once():
    t = await _solve("What is 12 * 13?", "math")
    first, last = t.work_requests
    assert first.messages[-1].content == f"What is 12 * 13?\n\nSolve it.\n\n{MATH.earlier}"
    assert last.messages[-1].content == f"Give the answer.\n\n{MATH.final}"
    assert [m.content for m in last.messages[:2]] == [
        "What is 12 * 13?\n\nSolve it.",
        "sim-frontier@0: saw 1 msgs",
    ]
    for step in (0, 1):  # never doubled: one instruction per worker call, whatever the history holds
        text = _all_text(t, step)
        assert text.count("\\boxed{") == 1, text


async def test_question_that_already_asks_for_a_box_gets_no_instruction():
    question = "What is 12 * 13? Put your final answer within \\boxed{}."
    t = await _solve(question, "math")
    for step in (0, 1):
        assert MATH.final not in _all_text(t, step) and MATH.earlier not in _all_text(t, step)
    assert t.work_requests[1].messages[-1].content == "Give the answer."


async def test_subtask_that_already_asks_gets_no_second_instruction():
    wf = Workflow(model_id=[0], subtasks=["Solve; end with 'Answer: X' for your letter."], access_list=[[]])
    t = await _solve("Which is a prime? A) 4 B) 7", "gpqa", workflows=[wf])
    assert DEFAULT_FORMATS["mcq"].final not in _all_text(t, 0)


async def test_no_domain_and_pool_off_leave_messages_unchanged():
    plain = await _solve("What is 12 * 13?", None)
    off_pool = msgspec.structs.replace(POOL, answer_format=AnswerFormat(steps="off"))
    off = await _solve("What is 12 * 13?", "math", pool=off_pool)
    for t in (plain, off):
        assert [r.messages for r in t.work_requests] == [
            build_messages("What is 12 * 13?", "Solve it.", []),
            build_messages(
                "What is 12 * 13?", "Give the answer.", [("Solve it.", "sim-frontier@0: saw 1 msgs")]
            ),
        ]


async def test_final_scope_marks_only_each_rounds_last_step():
    final_pool = msgspec.structs.replace(POOL, answer_format=AnswerFormat(steps="final"))
    t = await _solve("Pick one. A) x B) y", "mcq", pool=final_pool)
    assert DEFAULT_FORMATS["mcq"].earlier not in _all_text(t, 0) and DEFAULT_FORMATS[
        "mcq"
    ].final not in _all_text(t, 0)
    assert t.work_requests[1].messages[-1].content.endswith(DEFAULT_FORMATS["mcq"].final)
