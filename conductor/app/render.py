"""Terminal rendering of results: a workflow as a readable tree, the demo's results table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from conductor.money import usd
from schemas.solve import RoundRecord, SolveResult, StepRecord


def _access_text(step: StepRecord) -> str:
    if step.access == "all":
        return "sees all earlier steps" if step.index else "sees nothing earlier"
    if not step.access:
        return "sees no earlier step"
    return "sees steps " + ", ".join(str(i) for i in step.access)


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def result_tree(result: SolveResult, *, width: int = 160) -> Tree:
    root = Tree(Text(f"task {result.task_id}", style="bold"))
    for rnd in result.workflows:
        label = f"round {rnd.round} · policy {rnd.policy}"
        if rnd.fallback_used:
            label += " (fallback)"
        node = root.add(Text(label, style="cyan"))
        if rnd.policy_error is not None:  # why the fallback planned: the policy backend failed
            why = "policy backend failed: " + _short(rnd.policy_error.message, width)
            node.add(Text(why, style="yellow"))
        for sample in rnd.rejected:  # ... or its samples did not parse
            rejected = f"rejected sample: {sample.reason}: {_short(sample.text, width // 2)}"
            node.add(Text(rejected, style="yellow"))
        if rnd.reasoning:
            node.add(Text("plan: " + _short(rnd.reasoning, width), style="dim"))
        if rnd.handback:
            node.add(Text("handed the previous answer back unchanged", style="green"))
        for step in rnd.steps:
            head = f"step {step.index} → {step.worker} (Model {step.model_id}), {_access_text(step)}"
            s = node.add(Text(head, style="bold"))
            s.add(Text("subtask: " + _short(step.subtask, width)))
            if step.error is not None:
                s.add(Text(f"error: {step.error.code}: {step.error.message}", style="red"))
            else:
                s.add(Text("response: " + _short(step.response, width), style="dim"))
                u = step.usage
                s.add(
                    Text(
                        f"{u.input_tokens}+{u.output_tokens} tokens, {usd(u.cost_usd)}, {step.latency_s:.2f}s"
                    )
                )
        if rnd.error is not None:
            node.add(Text(f"error: {rnd.error.code}: {rnd.error.message}", style="red"))
    return root


def result_view(result: SolveResult) -> Group:
    parts: list[object] = [result_tree(result)]
    if result.error is not None:
        where = f" (field {result.error.field})" if result.error.field else ""
        parts.append(Text(f"error: {result.error.code}{where}: {result.error.message}", style="bold red"))
    parts.append(Text("answer: " + (result.answer if result.answer is not None else "—"), style="bold green"))
    if result.verdict is not None:
        parts.append(
            Text(f"verdict: {result.verdict.outcome} ({result.verdict.reason}); reward {result.reward}")
        )
    t = result.usage.total
    parts.append(
        Text(f"usage: {t.calls} calls, {t.total_tokens} tokens, {usd(t.cost_usd)}; {result.latency_s:.2f}s")
    )
    return Group(*parts)


def demo_table(rows: Sequence[tuple[str, str, SolveResult]]) -> Table:
    """``rows`` = (question id, domain, result)."""
    table = Table(title="Conductor demo results", show_lines=False)
    for col in ("id", "domain", "correct", "steps", "workers", "tokens", "$", "latency s"):
        table.add_column(col, justify="right" if col in {"steps", "tokens", "$", "latency s"} else "left")
    for qid, domain, res in rows:
        steps = [s for r in res.workflows for s in r.steps]
        workers = ",".join(dict.fromkeys(s.worker for s in steps)) or "—"
        if res.error is not None and res.verdict is None:
            correct = Text(f"error: {res.error.code}", style="red")
        elif res.verdict is None:
            correct = Text("—")
        else:
            ok = res.verdict.outcome == "correct"
            correct = Text("yes" if ok else str(res.verdict.outcome), style="green" if ok else "red")
        t = res.usage.total
        table.add_row(
            qid,
            domain,
            correct,
            str(len(steps)),
            workers,
            str(t.total_tokens),
            usd(t.cost_usd),
            f"{res.latency_s:.2f}",
        )
    return table


def workflow_line(result: SolveResult) -> str:
    """The workflows a result ran, one worker per step in order, what each saw in brackets ("sim-math → sim-math
    [all]"); rounds separated by " | ", a fallback marked "(fallback)"."""
    rounds = []
    for r in result.workflows:
        steps = [s.worker + ("" if not s.access else f" [{_access(s.access)}]") for s in r.steps]
        line = " → ".join(steps) or ("hand back" if r.handback else "—")
        rounds.append(line + (" (fallback)" if r.fallback_used else ""))
    return " | ".join(rounds) or "—"


def _access(access: object) -> str:
    return access if isinstance(access, str) else ",".join(map(str, access))  # type: ignore[arg-type]


def round_line(rnd: RoundRecord, domain: str | None = None) -> str:
    """One round as the replay demo prints it: its policy, then each step's worker (what it saw in brackets) and
    the final answer it stated (tasks/finals.py ``step_answer``: what a recursion round is shown); a second
    round that ran nothing is the hand-back, one that ran steps escalated to their workers."""
    from tasks.finals import step_answer

    head = f"round {rnd.round} · {rnd.policy}{' (fallback)' if rnd.fallback_used else ''}: "
    steps = []
    for s in rnd.steps:
        said = (
            f"error {s.error.code.value}"
            if s.error is not None
            else step_answer(s.response, domain) or "no answer"
        )
        steps.append(f"{s.worker}{'' if not s.access else f' [{_access(s.access)}]'} → {said}")
    failed = f" · error {rnd.error.code.value}: {rnd.error.message}" if rnd.error is not None else ""
    if rnd.round == 0:
        return head + ("; ".join(steps) or "no steps") + failed
    if rnd.handback:
        return head + "hand back (the first round's answer stands)" + failed
    workers = ", ".join(dict.fromkeys(s.worker for s in rnd.steps))
    return head + f"escalate to {workers}: " + ("; ".join(steps) or "no steps") + failed
