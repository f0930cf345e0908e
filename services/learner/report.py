"""The training report: ``report.png`` (curves) and ``report.html`` (the stages' figures and the curves) of a run.

Read from the run's own files (``metrics.jsonl``, ``stages.json``), so a report can be rebuilt at any time — during a
run, after a crash, or for an old run — with ``python -m services.learner.report RUN_DIR``. The stage table of a
recipe that runs as a chain of runs (issue 18: search, views, expert iteration, GRPO), as Markdown:
``python -m services.learner.report --table RUN_DIR...``.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import Any

from services.learner.telemetry import read_lines

PANELS = [
    ("reward_mean", "reward (mean, scored rollouts)"),
    ("parse_failure_rate", "parse failures"),
    ("steps_per_workflow", "steps per workflow"),
    ("usd_per_rollout", "$ per rollout"),
]


def plot(lines: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7))
    steps = [line["step"] for line in lines]
    for ax, (key, title) in zip(axes.flat, PANELS, strict=False):
        ax.plot(steps, [line.get(key) for line in lines], marker=".")
        if key == "reward_mean":
            ax.plot(
                steps, _smooth([line.get(key) for line in lines]), color="black", label="moving mean (10)"
            )
            ax.legend()
        ax.set_title(title)
        ax.set_xlabel("step")
    _times(axes.flat[4], lines, steps)
    _workers(axes.flat[5], lines, steps)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _smooth(values: list[float | None], n: int = 10) -> list[float | None]:
    out: list[float | None] = []
    for i in range(len(values)):
        window = [v for v in values[max(0, i - n + 1) : i + 1] if v is not None]
        out.append(sum(window) / len(window) if window else None)
    return out


def _times(ax: Any, lines: list[dict[str, Any]], steps: list[int]) -> None:
    parts = ["generation_s", "rollout_s", "update_s"]
    ax.stackplot(steps, *[[line.get(p) or 0.0 for line in lines] for p in parts], labels=parts)
    ax.set_title("step time split (s)")
    ax.legend(loc="upper left", fontsize=7)


def _workers(ax: Any, lines: list[dict[str, Any]], steps: list[int]) -> None:
    names = sorted({w for line in lines for w in line.get("workers", {})})
    shares = []
    for name in names:
        shares.append(
            [
                line.get("workers", {}).get(name, 0) / max(1, sum(line.get("workers", {}).values()))
                for line in lines
            ]
        )
    if names:
        ax.stackplot(steps, *shares, labels=names)
        ax.legend(loc="upper left", fontsize=7)
    ax.set_title("worker selection (share of steps)")


def write_report(run_dir: Path) -> Path:
    lines = [line for line in read_lines(run_dir / "metrics.jsonl") if line.get("stage") == "grpo"]
    stages_file = run_dir / "stages.json"
    stages = json.loads(stages_file.read_text()) if stages_file.is_file() else {}
    if lines:
        plot(lines, run_dir / "report.png")
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td><pre>{html.escape(json.dumps(figures, indent=1, default=str))}</pre>"
        "</td></tr>"
        for name, figures in stages.items()
    )
    image = '<img src="report.png" width="100%">' if lines else "<p>No GRPO steps yet.</p>"
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Conductor training: {html.escape(run_dir.name)}"
        f"</title></head><body><h1>Conductor training run <code>{html.escape(str(run_dir))}</code></h1>"
        f"<h2>Curves ({len(lines)} GRPO steps)</h2>{image}<h2>Stages</h2><table border=1>{rows}</table></body></html>"
    )
    out = run_dir / "report.html"
    out.write_text(page, encoding="utf-8")
    return out


STAGE_COLUMNS = (
    "| run | stage | parse rate | held-out correct | $ / rollout | steps | specialist (any step) | shapes |"
)


def stage_table(run_dirs: list[Path]) -> str:
    """One row per measured stage of each run, in order: the parse rate of the probe prompts and, for a stage with a
    held-out measurement, its correct share, $ per rollout, steps per workflow, the domain specialist's share of
    the workflows per domain and the commonest workflow shapes (access patterns)."""
    lines = [STAGE_COLUMNS, _rule()]
    for run in run_dirs:
        stages_file = run / "stages.json"
        if not stages_file.is_file():
            raise FileNotFoundError(f"{run}: no stages.json (not a training run's directory)")
        for name, figures in json.loads(stages_file.read_text()).items():
            held = figures.get("held_out") or {}
            if "parse_rate" not in figures and not held:
                continue  # a bookkeeping entry (the GRPO stage's policy path)
            share = held.get("specialist_share") or {}
            shapes = list((held.get("topologies") or {}).items())[:3]
            lines.append(
                "| "
                + " | ".join(
                    [
                        run.name,
                        name,
                        _num(figures.get("parse_rate"), 2),
                        _pct(held.get("correct_rate")),
                        _num(held.get("usd_per_rollout"), 5),
                        _num(held.get("steps_per_workflow"), 2),
                        ", ".join(f"{d} {_pct(v.get('any_step'))}" for d, v in sorted(share.items())) or "—",
                        ", ".join(f"`{shape}` {n}" for shape, n in shapes) or "—",
                    ]
                )
                + " |"
            )
    return "\n".join(lines)


def _rule() -> str:
    return "|" + "---|" * (STAGE_COLUMNS.count("|") - 1)


def _num(value: Any, places: int) -> str:
    return "—" if value is None else f"{value:.{places}f}"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        print(stage_table([Path(p) for p in sys.argv[2:]]))
    else:
        print(write_report(Path(sys.argv[1])))
