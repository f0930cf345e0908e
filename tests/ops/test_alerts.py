"""The chart's PrometheusRule, rendered and run through promtool: the rules load, every alert fires on a series
that should fire it and stays quiet on one that should not (alerts_test.yaml), and every expression names only
series and labels something exports."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.chart import objects, render
from tests.ops.promql import unknown

HERE = Path(__file__).parent
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not installed (Debian's `prometheus` package; `make test-ops` installs it)",
)


def _rules() -> dict:
    (rule,) = objects(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    return rule["spec"]


def _alerts(spec: dict) -> list[dict]:
    return [r for g in spec["groups"] for r in g["rules"] if "alert" in r]


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rendered rules as rules.yaml beside a copy of alerts_test.yaml, which names it."""
    out = tmp_path_factory.mktemp("rules")
    (out / "rules.yaml").write_text(yaml.safe_dump(_rules(), sort_keys=False), encoding="utf-8")
    shutil.copy(HERE / "alerts_test.yaml", out / "alerts_test.yaml")
    return out


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.ops
@needs_promtool
def test_rules_load(rules_dir: Path) -> None:
    done = _promtool("check", "rules", "rules.yaml", cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.ops
@needs_promtool
def test_every_alert_fires_and_stays_quiet(rules_dir: Path) -> None:
    done = _promtool("test", "rules", "alerts_test.yaml", cwd=rules_dir)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = yaml.safe_load((HERE / "alerts_test.yaml").read_text(encoding="utf-8"))["tests"]
    fires, quiet = set(), set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts(_rules())}
    assert names - fires == set(), "alerts never seen firing"
    assert names - quiet == set(), "alerts never seen quiet"
    assert (fires | quiet) - names == set(), "cases for alerts the chart does not have"


def test_alerts_name_only_exported_series() -> None:
    problems = {a["alert"]: unknown(a["expr"]) for a in _alerts(_rules())}
    assert {k: v for k, v in problems.items() if v} == {}


def test_rule_off_by_default_and_labelled_for_the_operator() -> None:
    assert objects(render({}), "PrometheusRule") == []
    (rule,) = objects(
        render({"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}), "PrometheusRule"
    )
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
