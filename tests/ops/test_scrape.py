"""The services' metrics scraped for real: Debian's Prometheus scrapes `conductor serve` processes (the helpers and
the executor, each on its own metrics port, labelled like the chart's ServiceMonitor targets) while a short workload
runs on a fault-injecting pool; then every metric docs/deployment.md documents is a series with its documented labels, every
dashboard panel's query returns data, and the chart's alert rules evaluate without error on the real series."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from bench.processes import Service
from conductor.access import CLIENT
from conductor.client import ConductorClient, connect
from conductor.credentials import connection
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings
from infra import dashboard
from schemas.solve import SolveRequest, solve_subject
from tests.chaos.harness import pool_file
from tests.deploy.chart import NAMESPACE, objects, render
from tests.ops.promql import TARGET_LABELS, as_sent, exported

PROMETHEUS = shutil.which("prometheus")
pytestmark = [
    pytest.mark.ops,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        PROMETHEUS is None,
        reason="prometheus not installed (Debian's `prometheus`; `make test-ops` installs it)",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
# What this workload cannot make happen, and where it is exercised instead: such a metric must still be exported
# (Prometheus saw its metadata in the scrape), just without a series.
NO_SERIES = {
    "conductor_worker_replays_total": "needs a resumed task replaying its steps (the chaos tier kills executors)",
}
# Panels whose series come from something this tier does not run.
NO_DATA = {
    "Task queue lag": "prometheus-nats-exporter (nats.promExporter) is not packaged here",
    "Spend per gateway key": "the gateway is not part of this workload",
    "Policy version served": "only a planner serving a local policy version sets it (make test-learn)",
}


def _get(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]


def _query(port: int, expr: str) -> list[dict[str, Any]]:
    return _get(port, "/api/v1/query", query=expr)["result"]


class Prometheus:
    """Debian's prometheus on a free port, scraping ``targets`` (job name → port) every second, with the chart's
    alert rules loaded."""

    def __init__(self, tmp: Path, targets: dict[str, int]) -> None:
        self.port, self.tmp = free_port(), tmp
        (rule,) = objects(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
        (tmp / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [
                {
                    "job_name": job,
                    "static_configs": [
                        {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE}}
                    ],
                }
                for job, port in targets.items()
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert PROMETHEUS is not None
        log = (self.tmp / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.tmp / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        self.wait(lambda: _ready(self.port), "ready")

    def wait(self, done: Any, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            assert self.proc is not None and self.proc.poll() is None, f"prometheus exited; see {self.tmp}"
            time.sleep(0.5)
        raise AssertionError(f"prometheus: not {what} within {timeout:g}s; see {self.tmp}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


async def _workload(nats_url: str) -> int:
    """Solves with references (verdicts), a repeated cached one (a cache hit), a malformed request (a bad request)
    and one whose reply names a result subject (a refused reply). Returns how many tasks the executor finished."""
    settings = CommonSettings(nats_url=nats_url)
    questions = [
        SolveRequest(question=f"What is {i} + {i}?", reference=str(2 * i), policy="refine:2")
        for i in range(4)
    ]
    cached = SolveRequest(question="What is 7 * 6?", reference="42", cache=True, policy="single:1")
    async with ConductorClient(settings) as client:
        for result in await asyncio.gather(*(client.solve(q, timeout=120) for q in [*questions, cached])):
            assert result.answer or result.error is not None
        await client.solve(cached, timeout=120)
    nc = await connect(connection(settings, CLIENT), name="ops-test")
    try:
        bad = await nc.request(solve_subject(CLIENT), b"{not json", timeout=30)
        assert b"bad_request" in bad.data
        await nc.publish(
            solve_subject(CLIENT), msgspec.json.encode(cached), reply="conductor.results.client.forged"
        )
        await nc.flush()
    finally:
        await nc.close()
    return len(questions) + 3


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a Prometheus that has scraped the services after the workload."""
    tmp = tmp_path_factory.mktemp("ops")
    fault_port, helpers_port, executor_port = free_port(), free_port(), free_port()
    faults = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.fault_server", str(fault_port), "0.3", "7"],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert faults.stdout is not None and faults.stdout.readline().strip() == b"ready"
    with NatsServer(store_dir=tmp / "nats") as nats_server:
        env = {
            "NATS_URL": nats_server.url,
            "CONDUCTOR_POOL": str(pool_file(tmp, fault_port, timeout_s=2.0)),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.2",
        }
        helpers = Service(
            "planner,worker-adapter,verifier",
            {**env, "CONDUCTOR_METRICS_PORT": str(helpers_port)},
            tmp / "helpers.log",
        )
        executor = Service(
            "executor", {**env, "CONDUCTOR_METRICS_PORT": str(executor_port)}, tmp / "executor.log"
        )
        prom = Prometheus(
            tmp, {"rel-conductor-helpers": helpers_port, "rel-conductor-executor": executor_port}
        )
        try:
            helpers.start()
            executor.start()
            prom.start()
            tasks = asyncio.run(_workload(nats_server.url))
            prom.wait(lambda: _total(prom.port, "conductor_tasks_total") >= tasks, f"seeing {tasks} tasks")
            time.sleep(3)  # a few more scrapes, so that every rate has two samples after the last change
            yield prom.port
        finally:
            prom.stop()
            executor.stop()
            helpers.stop()
            faults.terminate()
            faults.wait(timeout=30)


def _total(port: int, name: str) -> float:
    result = _query(port, f"sum({name})")
    return float(result[0]["value"][1]) if result else 0.0


def documented() -> dict[str, frozenset[str] | None]:
    """The metrics docs/deployment.md lists → their labels as written (None: none written)."""
    readme = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    section = readme[readme.index("Metrics (`conductor/metrics.py`)") :]
    section = section[: section.index("plus process metrics")]
    section = section.replace(
        "`/`_misses_total", "`, `conductor_cache_misses_total"
    )  # hits/misses, written once
    out: dict[str, frozenset[str] | None] = {}
    for name, labels in re.findall(r"`(conductor_[a-z_]+)(?:\{([a-z_,]+)\})?`", section):
        out[name] = frozenset(labels.split(",")) if labels else None
    return out


def test_the_docs_list_only_exported_metrics_with_their_labels():
    ours = exported()
    for name, labels in documented().items():
        series = name if name in ours else f"{name}_bucket"
        assert series in ours, f"docs/deployment.md documents {name}, which nothing exports"
        if labels is not None:
            assert ours[series] - {"le"} == labels, name


def test_every_documented_metric_is_scraped_with_its_labels(prometheus: int):
    ours = exported()
    for name in documented():
        series = name if name in ours else f"{name}_bucket"
        found = _get(prometheus, "/api/v1/series", **{"match[]": f'{series}{{namespace="{NAMESPACE}"}}'})
        if name in NO_SERIES:
            assert _get(prometheus, "/api/v1/metadata", metric=name), name
            continue
        assert found, f"{series}: no series scraped"
        for labels in found:
            assert set(labels) - TARGET_LABELS - {"__name__"} == ours[series], (series, labels)


def test_every_dashboard_panel_returns_data(prometheus: int):
    empty = []
    for _, panels in dashboard.ROWS:
        for panel in panels:
            results = [
                _query(prometheus, as_sent(q.expr, namespace=NAMESPACE)) for q in panel.queries
            ]  # each must execute
            if panel.title not in NO_DATA and not any(results):
                empty.append(panel.title)
    assert empty == []


def test_alert_rules_evaluate_on_the_scraped_series(prometheus: int):
    groups = _get(prometheus, "/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    # The fault server fails 30% of tries: nothing here is a dead letter or a misconfigured worker.
    assert not {a["labels"]["alertname"] for a in _get(prometheus, "/api/v1/alerts")["alerts"]} & {
        "ConductorDeadLetters",
        "ConductorWorkerMisconfigured",
        "ConductorTargetDown",
    }
