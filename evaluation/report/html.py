"""``report.html``: one self-contained page — no script, font, stylesheet or image is loaded from anywhere.

Sections: the accuracy table, accuracy vs $ per question (Pareto front marked), the worker-selection heatmaps, the
steps-per-workflow histogram, every workflow as a graph with its subtasks and responses behind ``<details>``, and
the failures grouped by reason. Every piece of model or dataset text goes through ``html.escape``.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from html import escape
from pathlib import Path

from conductor.money import usd
from evaluation.records import ItemResult
from evaluation.report import charts
from evaluation.report.graph import workflow_svg
from evaluation.table import AVERAGE, Results, pct, version_line
from schemas.solve import StepRecord

MAX_TEXT = 4000
"""Characters of a subtask or response shown in the page; the rest stays in items.jsonl."""

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1600px;color:#222;padding:0 16px}
.scroll{overflow-x:auto}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:.9em}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right;white-space:nowrap}
#failures td{white-space:normal}
th:first-child,td:first-child{text-align:left}thead th{background:#f3f5f9}td.best{font-weight:700}
.meta{color:#555;font-size:.9em}.chart svg{max-width:100%;height:auto}.wf{display:block;margin:6px 0}
details{margin:3px 0}summary{cursor:pointer}details.group>summary{font-weight:600}
details.item{margin-left:18px}details.step{margin-left:18px}.ok{color:#2b7a1f}.bad{color:#b3261e}
pre{white-space:pre-wrap;background:#f7f7f7;padding:6px;border-radius:4px;font-size:.85em;max-height:24em;overflow:auto}
.note{color:#666;font-size:.85em}
"""


def _short(text: str, limit: int = MAX_TEXT) -> str:
    if len(text) <= limit:
        return escape(text)
    return escape(text[:limit]) + escape(f"… ({len(text) - limit} more characters in items.jsonl)")


def accuracy_table(results: Results) -> str:
    cols = [*results.benchmarks, AVERAGE]
    best = {c: max((r.accuracy.mean for r in results.rows if r.benchmark == c), default=None) for c in cols}
    head = "".join(
        f"<th>{escape(c)}</th>"
        for c in [
            "strategy",
            *cols,
            "tokens/q",
            "$/q",
            "calls/q",
            "steps/wf",
            *(["AIQ"] if results.aiq else []),
        ]
    )
    body = []
    for s in results.strategies:
        avg = results.row(s, AVERAGE)
        if avg is None:
            continue
        cells = []
        for c in cols:
            r = results.row(s, c)
            mark = ' class="best"' if r is not None and r.accuracy.mean == best[c] else ""
            cells.append(f"<td{mark}>{pct(r.accuracy) if r else '—'}</td>")
        body.append(
            f"<tr><td>{escape(s)}</td>{''.join(cells)}<td>{avg.tokens_per_question:,.0f}</td>"
            f"<td>{usd(avg.cost_per_question)}</td><td>{avg.calls_per_question:.2f}</td>"
            f"<td>{avg.steps_per_workflow:.2f}</td>{_aiq(results, s)}</tr>"
        )
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _aiq(results: Results, strategy: str) -> str:
    """The AIQ cell (evaluation/table.py ``with_aiq``): nothing when the run has no AIQ."""
    if not results.aiq:
        return ""
    return f"<td>{results.aiq[strategy]:.4f}</td>" if strategy in results.aiq else "<td>—</td>"


def _access(step: StepRecord) -> str:
    if step.access == "all":
        return "sees all earlier steps" if step.index else "sees no earlier step"
    return "sees steps " + ", ".join(map(str, step.access)) if step.access else "sees no earlier step"


def _step(step: StepRecord) -> str:
    status = f' <span class="bad">{escape(step.error.code)}</span>' if step.error else ""
    body = f"<b>subtask</b><pre>{_short(step.subtask)}</pre><b>response</b><pre>{_short(step.response)}</pre>"
    if step.error:
        body += f"<b>error</b><pre>{_short(step.error.message)}</pre>"
    return (
        f'<details class="step"><summary>step {step.index} → {escape(step.worker)} ({_access(step)}, '
        f"{step.usage.total_tokens} tokens, {usd(step.usage.cost_usd)}){status}</summary>{body}</details>"
    )


def workflow(item: ItemResult, uid: str) -> str:
    css = "ok" if item.correct else "bad"
    rounds = item.result.workflows
    steps = "".join(_step(s) for r in rounds for s in r.steps)
    plans = "".join(
        f"<b>round {r.round} plan</b><pre>{_short(r.reasoning, 1500)}</pre>" for r in rounds if r.reasoning
    )
    return (
        f'<details class="item"><summary>{escape(item.item)} · repeat {item.repeat} · '
        f'<span class="{css}">{escape(item.outcome)}</span> · {escape(" → ".join(item.workers) or "no steps")}'
        f"</summary>{workflow_svg(rounds, uid, correct=item.correct if item.outcome != 'failed' else None)}"
        f"<b>question</b><pre>{_short(item.question, 1500)}</pre>{plans}{steps}"
        f"<b>answer</b><pre>{_short(item.result.answer or '—', 1500)}</pre>"
        f'<p class="note">{escape(item.outcome)}: {_short(item.reason, 500)}</p></details>'
    )


def workflows(items: Sequence[ItemResult], max_workflows: int) -> str:
    groups: dict[tuple[str, str], list[ItemResult]] = defaultdict(list)
    for it in items:
        groups[(it.benchmark, it.strategy)].append(it)
    per_group = max(1, max_workflows // max(len(groups), 1))
    out, shown = [], 0
    for n, ((bench, strategy), group) in enumerate(groups.items()):
        correct = sum(it.correct for it in group)
        drawn = "".join(workflow(it, f"{n}-{i}") for i, it in enumerate(group[:per_group]))
        shown += min(len(group), per_group)
        more = (
            f'<p class="note">{len(group) - per_group} more in items.jsonl</p>'
            if len(group) > per_group
            else ""
        )
        out.append(
            f'<details class="group"><summary>{escape(bench)} · {escape(strategy)} — {len(group)} '
            f"workflows, {correct} correct</summary>{drawn}{more}</details>"
        )
    note = f'<p class="note">{shown} of {len(items)} workflows drawn (at most {per_group} per benchmark × strategy).</p>'
    return note + "".join(out)


def reason_group(item: ItemResult) -> str:
    """A failure's reason with the specifics (numbers, quoted text) blanked, so alike failures group together."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", item.reason)
    text = re.sub(r"\d+(?:\.\d+)?", "N", text)
    code = f"{item.error_code}: " if item.error_code else ""
    return f"{item.outcome} — {code}{text[:140]}"


def failures(items: Sequence[ItemResult]) -> str:
    bad = [it for it in items if not it.correct]
    if not bad:
        return "<p>No failures: every item was answered correctly.</p>"
    groups: dict[str, list[ItemResult]] = defaultdict(list)
    for it in bad:
        groups[reason_group(it)].append(it)
    rows = []
    for reason, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        by_strategy = ", ".join(
            f"{escape(s)} {n}" for s, n in Counter(it.strategy for it in group).most_common()
        )
        examples = ", ".join(escape(f"{it.benchmark}/{it.item}") for it in group[:3])
        rows.append(
            f"<tr><td>{escape(reason)}</td><td>{len(group)}</td><td>{by_strategy}</td><td>{examples}</td></tr>"
        )
    head = "<tr><th>reason</th><th>items</th><th>by strategy</th><th>examples</th></tr>"
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def _workers(results: Results, items: Sequence[ItemResult]) -> list[str]:
    listed = [w for w in results.meta.get("workers", "").split(",") if w]
    seen = dict.fromkeys(w for it in items for w in it.workers)
    return listed + [w for w in seen if w not in listed]


def render(
    results: Results, items: Sequence[ItemResult], *, title: str = "Conductor eval", max_workflows: int = 400
) -> str:
    shown = {
        **{k: v for k, v in results.meta.items() if k != "workers"},
        "task versions": version_line(results),
    }
    meta = " · ".join(f"{escape(k)}: {escape(v)}" for k, v in shown.items() if v)
    sections = [
        ("accuracy", "Accuracy (%, mean ± standard error over repeats)", accuracy_table(results)),
        (
            "cost",
            "Accuracy vs $ per question (Pareto front ringed)",
            _chart(charts.accuracy_vs_cost(results)),
        ),
        (
            "workers",
            "Which workers each strategy used",
            _chart(charts.worker_heatmaps(results, _workers(results, items))),
        ),
        ("steps", "Steps per workflow", _chart(charts.steps_histogram(results))),
        ("workflows", "Workflows (steps as nodes, access as edges)", workflows(items, max_workflows)),
        ("failures", "Failures by reason", failures(items)),
    ]
    body = "".join(
        f'<section id="{sid}"><h2>{escape(h)}</h2>{content}</section>' for sid, h, content in sections
    )
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>"
        f'<p class="meta">{meta} · written {stamp}</p>{body}</body></html>'
    )


def _chart(svg: str) -> str:
    return f'<div class="chart">{svg}</div>'


def write_report(
    out_dir: Path,
    results: Results,
    items: Sequence[ItemResult],
    *,
    title: str = "Conductor eval",
    max_workflows: int = 400,
) -> Path:
    path = out_dir / "report.html"
    path.write_text(render(results, items, title=title, max_workflows=max_workflows), encoding="utf-8")
    return path
