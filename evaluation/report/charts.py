"""The report's charts, drawn by matplotlib (Agg backend) and inlined as SVG text.

Glyphs are drawn as paths (``svg.fonttype = path``, matplotlib's default) and the RDF metadata block is dropped, so
the SVG loads no font and names no URL but its XML namespaces. Each chart gets its own ``svg.hashsalt`` so the ids
of clip paths and markers never collide between charts inlined in one page.
"""

from __future__ import annotations

import io
import itertools
import re

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, no GUI toolkit

import matplotlib.pyplot as plt
import numpy as np

from evaluation import routers
from evaluation.table import AVERAGE, Results

_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
PALETTE = ("#4063d8", "#d9822b", "#389826", "#cb3c33", "#9558b2", "#2aa198", "#8c8c8c", "#b58900")


def to_svg(fig: plt.Figure, salt: str) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, doctype or metadata)."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "path"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return _METADATA.sub("", text[text.index("<svg") :])


def pareto_front(points: list[tuple[str, float, float]]) -> list[str]:
    """Labels of the points no other point beats on both axes: cheaper-or-equal *and* more-or-equally accurate,
    strictly better on one. ``points`` = (label, cost, accuracy)."""
    front = []
    for label, cost, acc in points:
        dominated = any(
            c <= cost and a >= acc and (c < cost or a > acc) for other, c, a in points if other != label
        )
        if not dominated:
            front.append(label)
    return front


def accuracy_vs_cost(results: Results) -> str:
    points = [
        (s, row.cost_per_question, 100 * row.accuracy.mean)
        for s in results.strategies
        if (row := results.row(s, AVERAGE)) is not None
    ]
    front = set(pareto_front(points))
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for i, (label, cost, acc) in enumerate(points):
        on = label in front
        ax.scatter(
            [cost],
            [acc],
            s=90 if on else 45,
            color=PALETTE[i % len(PALETTE)],
            zorder=3,
            edgecolors="black" if on else "none",
            linewidths=1.4,
        )
    for (label, cost, acc), dy in zip(points, _label_offsets(points), strict=True):
        ax.annotate(label, (cost, acc), textcoords="offset points", xytext=(7, dy), fontsize=8)
    line = sorted((c, a) for label, c, a in points if label in front)
    if len(line) > 1:
        ax.step(
            [c for c, _ in line],
            [a for _, a in line],
            where="post",
            color="black",
            lw=1,
            ls="--",
            label="Pareto front",
            zorder=2,
        )
    _workers_hull(ax, results, points)
    costs = [c for _, c, _ in points if c > 0]
    if costs and max(costs) / min(costs) > 20:
        ax.set_xscale("log")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(r"\$ per question (average over benchmarks)")
    ax.set_ylabel("accuracy (%, average)")
    ax.grid(alpha=0.3)
    return to_svg(fig, "accuracy-vs-cost")


def _workers_hull(ax: plt.Axes, results: Results, points: list[tuple[str, float, float]]) -> None:
    """RouterBench's zero router: the non-decreasing convex hull of the single workers (evaluation/routers.py),
    drawn densely so it stays straight-segmented on a log axis, its AIQ in the legend."""
    if results.aiq_workers is None:
        return
    line = routers.hull([(c, a) for label, c, a in points if label.startswith("single:")])
    xs = np.concatenate(
        [np.linspace(x0, x1, 24) for (x0, _), (x1, _) in itertools.pairwise(line)] or [[line[0][0]]]
    )
    ys = np.interp(xs, [x for x, _ in line], [y for _, y in line])
    ax.plot(
        xs,
        ys,
        color="#8c8c8c",
        lw=1,
        ls=":",
        zorder=1,
        label=f"workers' hull (AIQ {results.aiq_workers:.3f})",
    )


def _label_offsets(points: list[tuple[str, float, float]]) -> list[int]:
    """Vertical label offsets (points) that step apart labels of strategies landing on nearly the same spot."""
    offsets, placed = [], []
    for _, cost, acc in points:
        near = sum(
            1
            for c, a in placed
            if abs(a - acc) < 2.5 and (c == cost or 0.6 < (c or 1e-12) / (cost or 1e-12) < 1.6)
        )
        offsets.append(4 - 11 * near)
        placed.append((cost, acc))
    return offsets


def worker_heatmaps(results: Results, workers: list[str]) -> str:
    """Per benchmark: share of each strategy's steps that went to each worker (three benchmarks a row)."""
    benches = [b for b in results.benchmarks if results.worker_steps.get(b)] or results.benchmarks[:1]
    cols = min(3, len(benches))
    nrows = -(-len(benches) // cols)
    rows = results.strategies
    cell_w, cell_h = max(3.6, 1.2 + 0.5 * len(workers)), 0.34 * len(rows) + 1.6
    fig, axes = plt.subplots(nrows, cols, figsize=(cell_w * cols + 1.5, cell_h * nrows), squeeze=False)
    for ax in axes.flat[len(benches) :]:
        ax.axis("off")
    for ax, bench in zip(axes.flat, benches, strict=False):
        counts = results.worker_steps[bench]
        grid = np.array([[counts.get(s, {}).get(w, 0) for w in workers] for s in rows], dtype=float)
        totals = grid.sum(axis=1, keepdims=True)
        share = np.divide(grid, totals, out=np.zeros_like(grid), where=totals > 0)
        ax.imshow(share, cmap="Blues", vmin=0, vmax=1, aspect="auto")
        for (i, j), v in np.ndenumerate(share):
            if v > 0:
                ax.text(
                    j,
                    i,
                    f"{100 * v:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if v > 0.6 else "black",
                )
        ax.set_title(bench, fontsize=10)
        ax.set_xticks(range(len(workers)), workers, rotation=40, ha="right", fontsize=8)
        ax.set_yticks(range(len(rows)), rows if ax in axes[:, 0] else [], fontsize=8)
    fig.suptitle("share of each strategy's steps per worker (%)", fontsize=10)
    fig.tight_layout()
    return to_svg(fig, "worker-heatmaps")


def steps_histogram(results: Results) -> str:
    """Per strategy, the share of its workflows with 1, 2, ... steps."""
    hist = results.steps_histogram
    most = max((k for h in hist.values() for k in h), default=1)
    xs = np.arange(1, most + 1)
    strategies = [s for s in results.strategies if hist.get(s)]
    width = 0.8 / max(len(strategies), 1)
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for i, s in enumerate(strategies):
        total = sum(hist[s].values())
        ax.bar(
            xs + (i - (len(strategies) - 1) / 2) * width,
            [hist[s].get(int(x), 0) / total for x in xs],
            width=width,
            label=s,
            color=PALETTE[i % len(PALETTE)],
        )
    ax.set_xticks(xs)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("steps in a workflow")
    ax.set_ylabel("share of workflows")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return to_svg(fig, "steps-histogram")
