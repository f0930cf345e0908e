"""The services' metrics scraped for real: Debian's Prometheus scrapes `conductor serve` processes (the helpers, the
executor, the gateway with an API key, a planner serving a local policy version it loaded from the bucket, and a
learner training a tiny job whose rollouts the executor scores, each on its own metrics port, labelled like the chart's ServiceMonitor targets) and nats-server's JetStream gauges
(tests/ops/nats_exporter.py, prometheus-nats-exporter's names) while a short workload runs on a fault-injecting
pool; then every metric docs/deployment.md documents is a series with its documented labels, every dashboard panel's
query returns a number, the dashboard drawn from the same queries shows every panel in headless Chromium, and the
chart's alert rules evaluate without error on the real series."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
import yaml

from bench.processes import Service
from conductor.access import CLIENT
from conductor.client import ConductorClient, connect
from conductor.credentials import connection
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings
from infra import dashboard, render_dashboard
from schemas.learner import TRAIN_SUBJECT, TrainJob
from schemas.solve import SolveRequest, solve_subject
from services.gateway.keys import entry_toml, new_key
from services.learner.versions import publish_adapter
from tests.adapters import make_adapter, tiny_base
from tests.chaos.harness import pool_file
from tests.deploy.chart import NAMESPACE, objects, render
from tests.ops import nats_exporter
from tests.ops.promql import TARGET_LABELS, exported

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


def _chat(gateway: str, key: str, question: str) -> None:
    """One OpenAI-style chat completion through the gateway with ``key``."""
    body = {"model": "refine:2", "messages": [{"role": "user", "content": question}]}
    req = urllib.request.Request(
        f"{gateway}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            assert json.loads(resp.read())["object"] == "chat.completion"
    except (
        urllib.error.HTTPError
    ) as exc:  # a task failed on the fault server: still a request the key spent on
        assert exc.code >= 500, exc.read()


async def _publish_policy(tmp: Path, nats_url: str) -> tuple[Path, str]:
    """A tiny base model and a LoRA version of it in the policy bucket (tests/adapters.py, as the planner's version
    tests make them): the local planner of this tier loads it at start-up. (base directory, version name)"""
    base = tiny_base(tmp)
    adapter = make_adapter(base, tmp / "adapter", seed=1)
    nc = await nats.connect(nats_url)
    try:
        version = await publish_adapter(nc, adapter, base_dir=base, run="ops", step=1)
    finally:
        await nc.close()
    return base, version.version


LEARNER_RUN = "ops-tiny"
# The tiny-sim preset (services/learner/presets/tiny-sim.toml) cut to what the config allows, so the learner panel
# has every stage's progress and a few GRPO steps in about a minute: a one-layer model, 16 SFT rows, 2 held-out and
# probe questions, 3 GRPO steps of 2 questions x 2 completions, on this tier's pool (the fault server's workers,
# written into the learner's data directory: a job's paths stay inside it).
LEARNER_JOB = f"""
name = "{LEARNER_RUN}"

[model]
source = "tiny"
threads = 1
tiny_layers = 1
tiny_hidden = 32

[data]
pool_file = "pool.toml"
workers = ["w0", "w1"]
k_min = 2
k_max = 2
shuffle_view = false
few_shot = false
rules = false
eval_questions = 2
eval_samples = 1

[[data.tasks]]
name = "sim"
domains = ["math"]

[cold_start]
batch_size = 8
parse_probe = 2
[cold_start.synthetic]
examples = 16
topologies = ["single"]

[grpo]
steps = 3
questions_per_step = 2
generations = 2
max_completion_tokens = 40

[rollout]
batch_size = 4
concurrency = 2

[output]
dir = "{LEARNER_RUN}"
"""


async def _submit_job(nats_url: str) -> None:
    """The tiny training job on the learner's durable subject, as an operator submits one (docs/learner.md)."""
    nc = await nats.connect(nats_url)
    try:
        job = TrainJob(job_id=LEARNER_RUN, config=LEARNER_JOB)
        await nc.jetstream().publish(
            TRAIN_SUBJECT, msgspec.json.encode(job), headers={"Nats-Msg-Id": LEARNER_RUN}
        )
    finally:
        await nc.close()


@dataclass(frozen=True)
class Scraped:
    """A Prometheus that has scraped the services after the workload, and what the workload made."""

    port: int
    start: float  # when the workload began (unix seconds)
    policy_version: str  # what the local planner serves
    gateway_key: str  # the gateway key's name


def _services(
    tmp: Path, env: dict[str, str], planner_base: Path, keys: Path, learner_dir: Path
) -> dict[str, tuple[Service, int]]:
    """job name → (process, its metrics port): the chart's Deployments as `conductor serve` processes, plus a
    planner serving a local policy with versions watched, the gateway and the learner."""

    def one(services: str, extra: dict[str, str], log: str) -> tuple[Service, int]:
        port = free_port()
        return Service(services, {**env, **extra, "CONDUCTOR_METRICS_PORT": str(port)}, tmp / log), port

    local = {"CONDUCTOR_POLICY": f"local:{planner_base}", "CONDUCTOR_POLICY_VERSIONS": "watch"}
    door = {"CONDUCTOR_GATEWAY_PORT": str(free_port()), "CONDUCTOR_GATEWAY_KEYS_FILE": str(keys)}
    return {
        "rel-conductor-helpers": one("planner,worker-adapter,verifier", {}, "helpers.log"),
        "rel-conductor-executor": one("executor", {}, "executor.log"),
        "rel-conductor-planner": one("planner", local, "planner.log"),
        "rel-conductor-gateway": one("gateway", door, "gateway.log"),
        "rel-conductor-learner": one(
            "learner", {"CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(learner_dir)}, "learner.log"
        ),
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    tmp = tmp_path_factory.mktemp("ops")
    fault_port = free_port()
    with contextlib.ExitStack() as stack:
        faults = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.fault_server", str(fault_port), "0.3", "7"],
            stdout=subprocess.PIPE,
            cwd=ROOT,
        )
        stack.callback(faults.wait, timeout=30)
        stack.callback(faults.terminate)
        assert faults.stdout is not None and faults.stdout.readline().strip() == b"ready"
        nats_server = stack.enter_context(NatsServer(store_dir=tmp / "nats", monitor_port=free_port()))
        exporter_port = free_port()
        stack.callback(
            nats_exporter.serve(f"http://127.0.0.1:{nats_server.monitor_port}", exporter_port).shutdown
        )
        planner_base, version = asyncio.run(_publish_policy(tmp, nats_server.url))
        key, entry = new_key("ops")
        (tmp / "keys.toml").write_text(entry_toml(entry), encoding="utf-8")
        env = {
            "NATS_URL": nats_server.url,
            "CONDUCTOR_POOL": str(pool_file(tmp, fault_port, timeout_s=2.0)),
            "CONDUCTOR_LOG_LEVEL": "WARNING",
            "CONDUCTOR_RETRY_BACKOFF_BASE_S": "0.2",
        }
        learner_dir = tmp / "learner"
        learner_dir.mkdir()
        pool_file(learner_dir, fault_port, timeout_s=2.0, name="pool.toml")
        services = _services(tmp, env, planner_base, tmp / "keys.toml", learner_dir)
        for service, _ in services.values():
            stack.callback(service.stop)
            service.start(timeout=300)  # the local planner imports torch on two busy cores
        prom = Prometheus(tmp, {**{job: port for job, (_, port) in services.items()}, "nats": exporter_port})
        stack.callback(prom.stop)
        prom.start()
        # Prometheus hands targets to its scrapers some seconds after it is ready: a workload run before the first
        # scrape would appear as counters already at their final value, every rate 0 and every quantile NaN.
        prom.wait(lambda: _all_up(prom.port, len(services) + 1), "scraping every target")
        start = time.time()
        asyncio.run(
            _submit_job(nats_server.url)
        )  # it trains while the tasks run; its rollouts are the executor's
        tasks = asyncio.run(_workload(nats_server.url))
        # Two chats through the gateway with the key, a scrape apart: a counter's first sample is its baseline, so
        # only spend after it shows in a rate (the dashboard's panel plots dollars per hour).
        gateway = f"http://127.0.0.1:{services['rel-conductor-gateway'][0].env['CONDUCTOR_GATEWAY_PORT']}"
        _chat(gateway, key, "What is 5 * 3?")
        prom.wait(lambda: _total(prom.port, "conductor_gateway_cost_usd_total") > 0, "seeing the key's spend")
        _chat(gateway, key, "What is 6 * 3?")
        tasks += 2
        prom.wait(lambda: _total(prom.port, "conductor_tasks_total") >= tasks, f"seeing {tasks} tasks")
        prom.wait(lambda: _total(prom.port, "conductor_learner_jobs_total") >= 1, "seeing the job end", 300.0)
        time.sleep(3)  # a few more scrapes, so that every rate has two samples after the last change
        yield Scraped(port=prom.port, start=start, policy_version=version, gateway_key=entry.name)


def _all_up(port: int, targets: int) -> bool:
    up = _query(port, "up == 1")
    return len(up) == targets


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


def test_every_documented_metric_is_scraped_with_its_labels(prometheus: Scraped):
    ours = exported()
    for name in documented():
        series = name if name in ours else f"{name}_bucket"
        found = _get(prometheus.port, "/api/v1/series", **{"match[]": f'{series}{{namespace="{NAMESPACE}"}}'})
        if name in NO_SERIES:
            assert _get(prometheus.port, "/api/v1/metadata", metric=name), name
            continue
        assert found, f"{series}: no series scraped"
        for labels in found:
            assert set(labels) - TARGET_LABELS - {"__name__"} == ours[series], (series, labels)


def _panel_results(port: int) -> dict[str, list[dict[str, Any]]]:
    """Each panel's title → what its queries return, sent as Grafana sends them (each must execute)."""
    return {
        panel.title: [
            r for q in panel.queries for r in _query(port, dashboard.as_sent(q.expr, namespace=NAMESPACE))
        ]
        for _, panels in dashboard.ROWS
        for panel in panels
    }


def test_every_dashboard_panel_returns_data(prometheus: Scraped):
    results = _panel_results(prometheus.port)
    # a number Grafana draws, not only a series: NaN (a quantile of no observations) shows as nothing
    assert [title for title, found in results.items() if not any(_finite(r) for r in found)] == []
    lag = {(r["metric"]["stream_name"], r["metric"]["consumer_name"]) for r in results["Task queue lag"]}
    assert ("CONDUCTOR_TASKS", "executor") in lag, lag  # the executor's durable consumer, through /jsz
    spend = {r["metric"]["key"]: float(r["value"][1]) for r in results["Spend per gateway key"]}
    assert set(spend) == {prometheus.gateway_key} and spend[prometheus.gateway_key] > 0, spend
    served = {r["metric"].get("version", "") for r in results["Policy version served"]}
    assert prometheus.policy_version in served, served  # loaded from the bucket at the planner's start


def test_the_learner_panel_shows_the_tiny_jobs_progress(prometheus: Scraped):
    """The job ran through `conductor serve learner` to its end: every stage done, three GRPO steps with a reward
    logged, held-out rewards measured, and its rollouts (3 steps x 4 completions at least) scored by the executor."""
    (panel,) = [p for _, row in dashboard.ROWS for p in row if p.title == "Learner progress"]
    done_q, reward_q, held_out_q = (dashboard.as_sent(q.expr, namespace=NAMESPACE) for q in panel.queries)
    done = {
        (r["metric"]["run"], r["metric"]["stage"]): float(r["value"][1])
        for r in _query(prometheus.port, done_q)
    }
    stages = ("base", "sft", "before_grpo", "grpo", "after_grpo")
    assert {stage: done.get((LEARNER_RUN, stage)) for stage in stages} == dict.fromkeys(stages, 1.0), done
    assert _total(prometheus.port, f'conductor_learner_steps{{run="{LEARNER_RUN}", stage="grpo"}}') == 3
    (reward,) = _query(prometheus.port, reward_q)
    assert reward["metric"]["run"] == LEARNER_RUN and 0 <= float(reward["value"][1]) <= 1, reward
    held_out = {r["metric"]["stage"] for r in _query(prometheus.port, held_out_q)}
    assert {"before_grpo", "after_grpo"} <= held_out, held_out
    assert _total(prometheus.port, 'conductor_learner_jobs_total{outcome="ok"}') == 1
    assert _total(prometheus.port, f'conductor_learner_rollouts_total{{run="{LEARNER_RUN}"}}') >= 12


def _finite(result: dict[str, Any]) -> bool:
    return math.isfinite(float(result["value"][1]))


def test_the_dashboard_drawn_in_chromium_shows_every_panel(prometheus: Scraped, tmp_path: Path):
    """The page infra/render_dashboard.py draws from the same queries, opened in headless Chromium: every panel has
    series and drew them (a line or a table row), no console error; the screenshot is kept (the path is printed;
    CONDUCTOR_DASHBOARD_PNG=docs/dashboard.png refreshes the README's picture)."""
    pytest.importorskip("playwright", reason="`make test-ops` installs playwright")
    if not Path(render_dashboard.CHROMIUM).exists():
        pytest.skip(f"{render_dashboard.CHROMIUM} missing: `make test-ops` installs it")
    from playwright.sync_api import sync_playwright

    end = time.time()
    drawn = render_dashboard.collect(
        f"http://127.0.0.1:{prometheus.port}", NAMESPACE, prometheus.start - 30, end
    )
    html = tmp_path / "dashboard.html"
    html.write_text(render_dashboard.page(drawn, namespace=NAMESPACE, start=prometheus.start - 30, end=end))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=render_dashboard.CHROMIUM, args=["--no-sandbox"])
        tab = browser.new_page()
        errors: list[str] = []
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        tab.goto(html.as_uri())
        panels = tab.evaluate(PANELS)
        browser.close()
    assert errors == []
    titles = [p.title for _, row in dashboard.ROWS for p in row]
    assert [p["title"] for p in panels] == titles
    blank = [p["title"] for p in panels if not (p["series"] and p["marks"])]
    assert blank == [], [(d.panel.title, d.series) for d in drawn if d.panel.title in blank]
    png = Path(os.environ.get("CONDUCTOR_DASHBOARD_PNG", ROOT / "tests" / "artifacts" / "dashboard.png"))
    render_dashboard.screenshot(html, png)
    assert png.stat().st_size > 10_000
    print(f"dashboard screenshot: {png}")


PANELS = """[...document.querySelectorAll('.panel')].map(p => ({
  title: p.dataset.title,
  series: Number(p.dataset.series),
  marks: p.querySelectorAll('polyline, td').length,
}))"""


def test_alert_rules_evaluate_on_the_scraped_series(prometheus: Scraped):
    groups = _get(prometheus.port, "/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert rules and all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
    # The fault server fails 30% of tries: nothing here is a dead letter or a misconfigured worker.
    assert not {a["labels"]["alertname"] for a in _get(prometheus.port, "/api/v1/alerts")["alerts"]} & {
        "ConductorDeadLetters",
        "ConductorWorkerMisconfigured",
        "ConductorTargetDown",
    }
