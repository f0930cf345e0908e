"""Dollars as people read them (issue 19, item 8): no ``$1.09e-06``, no ``$0.00000``, wherever the CLI, the demo
and the eval report print a cost; a fallback's cause is shown in the result tree."""

from __future__ import annotations

from rich.console import Console

from conductor.app.render import demo_table, result_view
from conductor.money import usd
from evaluation.table import AVERAGE, Cell, Results, Row, rich_table
from schemas.errors import ErrorCode, ErrorInfo
from schemas.plan import RejectedSample
from schemas.solve import RoundRecord, SolveResult, StepRecord
from schemas.usage import Usage, UsageSummary


def test_two_significant_digits_under_a_dollar_cents_above():
    assert [usd(x) for x in (1.09e-06, 0.000543, 0.0123, 0.5, 0.00099999)] == [
        "$0.0000011",
        "$0.00054",
        "$0.012",
        "$0.50",
        "$0.0010",
    ]
    assert [usd(x) for x in (0.0, 0.999, 12.3456, 1234.5, -0.0003)] == [
        "$0",
        "$1.00",
        "$12.35",
        "$1,234.50",
        "-$0.00030",
    ]


def _text(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_cli_and_the_eval_table_print_a_tiny_cost_readably():
    """Failed before: ``$0.00000`` for a call that cost $0.0000011 (and the eval's progress read ``$0.0000``)."""
    u = Usage(input_tokens=9, output_tokens=3, cost_usd=1.09e-06, calls=1)
    step = StepRecord(index=0, model_id=0, worker="smol", subtask="s", access=[], response="4", usage=u)
    rnd = RoundRecord(
        round=0,
        policy="moa",
        steps=[step],
        fallback_used=True,
        policy_error=ErrorInfo(
            code=ErrorCode.PLANNER_ERROR, message="policy endpoint answered HTTP 404: no model"
        ),
        rejected=[RejectedSample(reason="missing_lists: no lists found", text="I would ask Model 0.")],
    )
    result = SolveResult(task_id="t", answer="4", workflows=[rnd], usage=UsageSummary(total=u))
    shown = _text(result_view(result)) + _text(demo_table([("q1", "math", result)]))
    assert "$0.0000011" in shown and "$0.00000 " not in shown and "e-0" not in shown
    assert "policy backend failed: policy endpoint answered HTTP 404" in shown
    assert "rejected sample: missing_lists: no lists found: I would ask Model 0." in shown
    cell = Cell(mean=1.0, se=None, per_repeat=[1.0])
    row = Row(
        strategy="moa",
        benchmark=AVERAGE,
        accuracy=cell,
        items=1,
        tokens_per_question=12.0,
        cost_per_question=1.09e-06,
        calls_per_question=1.0,
        steps_per_workflow=1.0,
        failures=0,
    )
    results = Results(
        benchmarks=["sim"], strategies=["moa"], repeats=1, rows=[row], worker_steps={}, steps_histogram={}
    )
    table = _text(rich_table(results))
    assert "$0.0000011" in table and "0.00000 " not in table
