"""What a PromQL expression selects, checked against what the services really export: conductor/metrics.py's
registry for our series, a short named list for the ones other exporters provide (the NATS chart's exporter,
kube-state-metrics, Prometheus itself)."""

from __future__ import annotations

from dataclasses import dataclass

import promql_parser

from conductor import metrics

# Labels Prometheus attaches to every scraped series (target labels from the ServiceMonitor or a static config).
TARGET_LABELS = frozenset({"namespace", "job", "instance", "service", "pod", "endpoint", "container"})

# Series of other exporters the alerts and the dashboard use, with the labels used from them.
# jetstream_*: prometheus-nats-exporter -jsz=all (the NATS chart's promExporter), collector/jsz.go.
_CONSUMER = frozenset({"stream_name", "consumer_name", "account", "server_name", "server_id", "cluster"})
EXTERNAL: dict[str, frozenset[str]] = {
    "up": frozenset(),
    "jetstream_consumer_num_pending": _CONSUMER,
    "jetstream_consumer_num_ack_pending": _CONSUMER,
    "jetstream_consumer_num_redelivered": _CONSUMER,
    "kube_deployment_status_replicas_unavailable": frozenset({"deployment"}),
}


def exported() -> dict[str, frozenset[str]]:
    """Every series name the services expose (``_total``, ``_bucket``, ``_info``, ... as scraped) → its labels."""
    out: dict[str, frozenset[str]] = {}
    for family in metrics.REGISTRY.collect():
        if not family.name.startswith("conductor_"):
            continue  # process and platform collectors: not ours to promise
        collector = metrics.REGISTRY._names_to_collectors[family.name]
        labels = frozenset(getattr(collector, "_labelnames", ())) | _INFO_LABELS.get(family.name, frozenset())
        for suffix in _SUFFIXES[family.type]:
            out[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else frozenset())
    return out


# An Info's labels are the keys of the dict it is set to (metrics.policy_version_served).
_INFO_LABELS = {"conductor_policy_version": frozenset({"version", "base", "sha256"})}
_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "info": ("_info",),
}


@dataclass(frozen=True)
class Selector:
    name: str
    labels: frozenset[str]


def selectors(expr: str) -> list[Selector]:
    """Every vector selector in ``expr`` (raises ``ValueError`` when it does not parse)."""
    found: list[Selector] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            names = {m.name for m in node.matchers.matchers}
            found.append(Selector(node.name or "", frozenset(names - {"__name__"})))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def unknown(expr: str) -> list[str]:
    """What ``expr`` names that nobody exports: a series name, or a label that series does not carry."""
    known = exported() | EXTERNAL
    problems = []
    for sel in selectors(expr):
        if sel.name not in known:
            problems.append(f"series {sel.name!r}")
            continue
        extra = sel.labels - known[sel.name] - TARGET_LABELS
        problems += [f"label {label!r} of {sel.name}" for label in sorted(extra)]
    return problems
