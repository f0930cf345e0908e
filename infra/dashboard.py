"""The Grafana dashboard shipped in the chart (charts/conductor/dashboards/conductor.json), built as typed code with
Grafana's foundation SDK from one table of panels, each a title, a unit and its PromQL.

Why generated: the JSON is what Grafana's dashboard sidecar loads, but a query edited there drifts from the series
the services export; here every query is a line of the table, the tests parse each one and check it names only
exported series and labels (tests/deploy/test_dashboard.py), and run it against a real Prometheus after a workload
(tests/ops/test_scrape.py). Run from the repository root: ``.venv/bin/python infra/dashboard.py`` (writes the file).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard, prometheus, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import prometheus as prometheus_models
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DataSourceRef

OUT = Path(__file__).resolve().parents[1] / "charts" / "conductor" / "dashboards" / "conductor.json"
UID = "conductor-overview"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Every conductor series of the release the viewer picked ($namespace): the chart's Services are <release>-conductor-*.
SEL = 'namespace="$namespace"'


@dataclass(frozen=True, kw_only=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, kw_only=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "table"
    width: int = 8


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr=expr, legend=legend)


def _quantiles(metric: str, matcher: str) -> tuple[Query, ...]:
    """p50, p95 and p99 of a histogram's series matching ``matcher``."""
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{SEL}, {matcher}}}[$__rate_interval])))",
            f"p{round(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    )


def _p95(metric: str, matcher: str, by: str) -> str:
    inner = f"{SEL}, {matcher}" if matcher else SEL
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile(0.95, sum by ({group}) (rate({metric}_bucket{{{inner}}}[$__rate_interval])))"


def _rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}{{{SEL}}}[$__rate_interval]))"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Tasks",
        (
            Panel(
                title="Tasks by outcome",
                description="Tasks finished by the executor per second: ok or the error code.",
                unit="reqps",
                queries=(_q(_rate("conductor_tasks_total", "outcome"), "{{outcome}}"),),
            ),
            Panel(
                title="Solve latency",
                description="Seconds from a task's start to its result (stage solve).",
                unit="s",
                queries=_quantiles("conductor_stage_latency_seconds", 'stage="solve"'),
            ),
            Panel(
                title="Redeliveries and dead letters",
                description="Durable task deliveries after the first, and tasks given up after MaxDeliver.",
                unit="short",
                queries=(
                    _q(
                        f"sum(increase(conductor_redeliveries_total{{{SEL}}}[$__rate_interval]))",
                        "redelivered",
                    ),
                    _q(
                        f"sum(increase(conductor_dead_letters_total{{{SEL}}}[$__rate_interval]))",
                        "dead-lettered",
                    ),
                ),
            ),
            Panel(
                title="Task queue lag",
                description="Messages the executor's consumer has not been delivered yet (nats.promExporter).",
                unit="short",
                queries=(
                    _q(
                        f'max by (stream_name, consumer_name) (jetstream_consumer_num_pending{{{SEL}, stream_name=~"CONDUCTOR_.*"}})',
                        "{{stream_name}}/{{consumer_name}} pending",
                    ),
                    _q(
                        f'max by (stream_name, consumer_name) (jetstream_consumer_num_ack_pending{{{SEL}, stream_name=~"CONDUCTOR_.*"}})',
                        "{{stream_name}}/{{consumer_name}} in flight",
                    ),
                ),
                width=12,
            ),
            Panel(
                title="Bad and refused requests",
                description="Requests rejected as malformed, and requests dropped for a reply subject outside an inbox.",
                unit="reqps",
                queries=(
                    _q(_rate("conductor_bad_requests_total", "subject"), "bad {{subject}}"),
                    _q(_rate("conductor_refused_replies_total", "subject"), "refused {{subject}}"),
                ),
                width=12,
            ),
        ),
    ),
    (
        "Workers",
        (
            Panel(
                title="Worker calls",
                description="Answered worker calls per second by worker and outcome (replays not counted).",
                unit="reqps",
                queries=(
                    _q(_rate("conductor_worker_calls_total", "worker, outcome"), "{{worker}} {{outcome}}"),
                ),
            ),
            Panel(
                title="Worker latency p95",
                description="95th percentile of one worker call, retries included.",
                unit="s",
                queries=(_q(_p95("conductor_worker_latency_seconds", "", "worker"), "{{worker}}"),),
            ),
            Panel(
                title="Worker faults by reason",
                description="Failed tries per second by worker and cause (rate_limited, server_error, timeout, ...).",
                unit="reqps",
                queries=(
                    _q(_rate("conductor_worker_faults_total", "worker, reason"), "{{worker}} {{reason}}"),
                ),
            ),
            Panel(
                title="Spend per worker",
                description="US dollars per hour of paid worker calls.",
                unit="currencyUSD",
                queries=(_q(f"3600 * {_rate('conductor_cost_usd_total', 'worker')}", "{{worker}}"),),
            ),
            Panel(
                title="Tokens per worker",
                description="Tokens per second by worker and direction.",
                unit="short",
                queries=(
                    _q(_rate("conductor_tokens_total", "worker, direction"), "{{worker}} {{direction}}"),
                ),
            ),
            Panel(
                title="Spend per gateway key",
                description="US dollars per hour spent for each gateway API key.",
                unit="currencyUSD",
                queries=(_q(f"3600 * {_rate('conductor_gateway_cost_usd_total', 'key')}", "{{key}}"),),
            ),
        ),
    ),
    (
        "Planner and verifier",
        (
            Panel(
                title="Plans by outcome",
                description="Planner replies per second, with fallback-written workflows and unparseable samples.",
                unit="reqps",
                queries=(
                    _q(_rate("conductor_plans_total", "outcome"), "{{outcome}}"),
                    _q(f"sum(rate(conductor_plan_fallbacks_total{{{SEL}}}[$__rate_interval]))", "fallback"),
                    _q(
                        f"sum(rate(conductor_plan_format_failures_total{{{SEL}}}[$__rate_interval]))",
                        "format failure",
                    ),
                ),
            ),
            Panel(
                title="Verdicts",
                description="Verifier verdicts per second: correct, incorrect, error (infrastructure, not a wrong answer).",
                unit="reqps",
                queries=(_q(_rate("conductor_verdicts_total", "outcome"), "{{outcome}}"),),
            ),
            Panel(
                title="Plan and verify latency",
                description="Seconds per plan and per verify batch.",
                unit="s",
                queries=(
                    _q(_p95("conductor_stage_latency_seconds", 'stage="plan"', ""), "plan p95"),
                    _q(_p95("conductor_stage_latency_seconds", 'stage="verify"', ""), "verify p95"),
                ),
            ),
            Panel(
                title="Policy version served",
                description="The policy version each planner's local backend serves (empty: the base model).",
                unit="none",
                queries=(
                    _q(f"max by (version, base, instance) (conductor_policy_version_info{{{SEL}}})", ""),
                ),
                kind="table",
                width=24,
            ),
        ),
    ),
    (
        "Learner",
        (
            Panel(
                title="Learner progress",
                description="Each training stage's share done (step / steps), the last GRPO step's mean reward, and "
                "the held-out reward measured after a stage, by run (the job config's name).",
                unit="none",
                queries=(
                    _q(
                        f"max by (run, stage) (conductor_learner_step{{{SEL}}})"
                        f" / max by (run, stage) (conductor_learner_steps{{{SEL}}} > 0)",
                        "{{run}} {{stage}} done",
                    ),
                    _q(f"max by (run) (conductor_learner_reward{{{SEL}}})", "{{run}} reward"),
                    _q(
                        f"max by (run, stage) (conductor_learner_held_out_reward{{{SEL}}})",
                        "{{run}} held-out after {{stage}}",
                    ),
                ),
                width=12,
            ),
            Panel(
                title="Learner rollouts",
                description="Rollouts the learner had scored per second: rewarded, unparsed (no workflow: reward 0) "
                "or masked (an infrastructure error left the reward unknown).",
                unit="reqps",
                queries=(
                    _q(_rate("conductor_learner_rollouts_total", "run, outcome"), "{{run}} {{outcome}}"),
                ),
                width=12,
            ),
        ),
    ),
)


def _panel(spec: Panel, panel_id: int) -> dashboard.Panel:
    builder = {"timeseries": timeseries.Panel, "table": table.Panel}[spec.kind]()
    builder.id(panel_id).title(spec.title).description(spec.description).datasource(DATASOURCE).unit(
        spec.unit
    ).span(spec.width).height(8)
    if spec.kind == "timeseries":
        builder.min(0).fill_opacity(10).legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
    for i, query in enumerate(spec.queries):
        target = prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(chr(ord("A") + i))
        if spec.kind == "table":
            target.instant().format(prometheus_models.PromQueryFormat.TABLE)
        builder.with_target(target)
    return builder


def build() -> dashboard.Dashboard:
    board = (
        dashboard.Dashboard("Conductor")
        .uid(UID)
        .description(
            "Tasks, workers, planner, verifier and learner of one Conductor release (charts/conductor)."
        )
        .tags(["conductor"])
        .refresh("30s")
        .time("now-1h", "now")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("namespace")
            .label("Namespace")
            .datasource(DataSourceRef(type_val="prometheus", uid="${datasource}"))
            .query("label_values(conductor_tasks_total, namespace)")
        )
    )
    ids = iter(range(1, 1000))  # stable ids: Grafana links and the sidecar's reloads keep a panel by its id
    for title, panels in ROWS:
        board.with_row(dashboard.Row(title).id(next(ids)))
        for spec in panels:
            board.with_panel(_panel(spec, next(ids)))
    return board.build()


def queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every query, for the tests."""
    return [(p.title, q.expr) for _, panels in ROWS for p in panels for q in p.queries]


def as_sent(expr: str, *, namespace: str = "ai", rate_interval: str = "1m") -> str:
    """A query as Grafana sends it to Prometheus: its variables substituted."""
    return expr.replace("$namespace", namespace).replace("$__rate_interval", rate_interval)


def render() -> str:
    return json.dumps(json.loads(JSONEncoder().encode(build())), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
