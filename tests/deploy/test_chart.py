"""The chart renders, lints and validates for every tested combination; its values are typed and documented."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from helm_python.chart import lint
from helm_python.errors import HelmValuesError

from infra import chart_schema
from tests.deploy.chart import CASES, CHART_DIR, KUBE_VERSION, case_values, chart, objects, rendered

CRD_KINDS = {
    "ScaledObject",
    "ServiceMonitor",
    "PodMonitor",
    "PrometheusRule",
}  # no schema ships with kubernetes-validate; checked by shape below


@pytest.mark.parametrize("case", CASES)
def test_lints_strict(case):
    report = lint(CHART_DIR, case_values(case), strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


@pytest.mark.parametrize("case", CASES)
def test_every_manifest_validates_strict(case):
    docs = rendered(case)
    assert docs
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_crd_objects_have_the_fields_their_operators_read():
    docs = rendered("vllm-workers")
    (scaled,) = objects(docs, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "nats-jetstream"
    assert (
        trigger["metadata"].items()
        >= {"stream": "CONDUCTOR_TASKS", "consumer": "executor", "account": "conductor"}.items()
    )
    assert trigger["metadata"]["natsServerMonitoringEndpoint"] == "rel-nats.ai.svc:8222"
    assert all(isinstance(v, str) for v in trigger["metadata"].values())  # KEDA metadata is map[string]string
    assert scaled["spec"]["scaleTargetRef"]["name"] == "rel-conductor-executor"
    (monitor,) = objects(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_keda_replaces_the_hpa_for_the_executor_only():
    docs = rendered("vllm-workers")
    hpas = {d["spec"]["scaleTargetRef"]["name"] for d in objects(docs, "HorizontalPodAutoscaler")}
    assert "rel-conductor-executor" not in hpas
    assert {"rel-conductor-planner", "rel-conductor-verifier", "rel-conductor-worker-adapter"} <= hpas
    default = {
        d["spec"]["scaleTargetRef"]["name"] for d in objects(rendered("default"), "HorizontalPodAutoscaler")
    }
    assert "rel-conductor-executor" in default


def test_autoscaling_off_fixes_replicas():
    docs = rendered("autoscaling-off")
    assert not objects(docs, "HorizontalPodAutoscaler") and not objects(docs, "ScaledObject")
    replicas = {d["metadata"]["name"]: d["spec"]["replicas"] for d in objects(docs, "Deployment")}
    assert replicas["rel-conductor-executor"] == 3 and replicas["rel-conductor-planner"] == 1


def test_external_nats_drops_the_bundled_server():
    docs = rendered("external-nats")
    assert not objects(docs, "StatefulSet")
    envs = [
        c["env"] for d in objects(docs, "Deployment") for c in d["spec"]["template"]["spec"]["containers"]
    ]
    urls = {e["value"] for env in envs for e in env if e["name"] == "NATS_URL"}
    assert all("@nats.messaging.svc.cluster.local:4222" in u for u in urls), urls
    secrets = {
        e["valueFrom"]["secretKeyRef"]["name"] for env in envs for e in env if e["name"] == "NATS_PASSWORD"
    }
    assert secrets == {"conductor-nats-credentials"}
    assert not [s for s in objects(docs, "Secret") if s["metadata"]["name"].endswith("nats-credentials")]


def test_schema_is_generated_from_values_and_current():
    committed = (CHART_DIR / "values.schema.json").read_text(encoding="utf-8")
    assert committed == chart_schema.render(), "run: .venv/bin/python infra/chart_schema.py"


def test_every_value_is_documented():
    missing: list[str] = []

    def walk(schema: dict, path: str) -> None:
        if path and "description" not in schema and not path.startswith("vllm.servers."):
            missing.append(path)
        for key, sub in schema.get("properties", {}).items():
            walk(sub, f"{path}.{key}" if path else key)

    walk(json.loads((CHART_DIR / "values.schema.json").read_text()), "")
    assert not missing, missing


@pytest.mark.parametrize("case", CASES)
def test_schema_accepts_every_tested_combination(case):
    chart().validate_schema(case_values(case))


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"planner": {"replica": 3}}, "/planner"),
        (
            {"executor": {"autoscaling": {"targetCPUUtilizationPercentage": 150}}},
            "targetCPUUtilizationPercentage",
        ),
        ({"nats": {"url": "http://nats:4222"}}, "/nats/url"),
        ({"nats": {"replicas": 3}}, "/nats"),  # the old bundled chart's key: neither chart reads it
        ({"nats": {"config": {"cluster": {"replicas": 2}}}}, "/nats/config/cluster/replicas"),
        ({"nats": {"config": {"jetstream": {"enabled": False}}}}, "/nats/config/jetstream/enabled"),
        (
            {"nats": {"config": {"jetstream": {"fileStore": {"pvc": {"size": "big"}}}}}},
            "/nats/config/jetstream",
        ),
        (
            {"nats": {"statefulSet": {"patch": [{"path": "/spec/replicas", "value": 2}]}}},
            "/nats/statefulSet/patch/0",
        ),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"metricsPort": 0}, "/metricsPort"),
        ({"verifier": {"sandbox": {"require": ["netns", "magic"]}}}, "/verifier/sandbox/require"),
        ({"verifier": {"sandbox": {"seccompProfile": {"type": "Off"}}}}, "seccompProfile"),
        ({"workerAdapter": {"nats": {"publish": ["two words"]}}}, "/workerAdapter/nats/publish"),
        ({"verifier": {"nats": {"responses": {"max": 0}}}}, "/verifier/nats/responses/max"),
        ({"executor": {"nats": {"responses": {"expires": "forever"}}}}, "/executor/nats/responses/expires"),
        ({"learner": {"checkpoints": {"size": "lots"}}}, "/learner/checkpoints/size"),
        ({"vllm": {"servers": {"extra": {"model": "m"}}}}, "/vllm/servers/extra"),
        ({"vllm": {"servers": {"policy": {"role": "boss"}}}}, "/vllm/servers/policy/role"),
        ({"auth": {"users": {"ops": {"publish": ["a"]}}}}, "/auth/users/ops"),
        ({"logLevel": "LOUD"}, "/logLevel"),
    ],
)
def test_schema_rejects_bad_values(values, where):
    with pytest.raises(HelmValuesError) as exc:
        chart().validate_schema(values)
    assert where in str(exc.value)


def test_required_values_fail_loudly():
    from helm_python.errors import HelmRenderError

    with pytest.raises(HelmRenderError, match=r"nats\.url is required"):
        chart().render({"nats": {"enabled": False}}, name="rel", namespace="ai")
    with pytest.raises(HelmRenderError, match=r"tls\.secretName is required"):
        chart().render(
            {"global": {"tls": {"enabled": True}}, "nats": {"enabled": False, "url": "tls://n:4222"}},
            name="rel",
            namespace="ai",
        )


@pytest.mark.parametrize("case", CASES)
def test_bundled_nats_in_every_case_but_external(case):
    assert len(objects(rendered(case), "StatefulSet")) == (0 if case == "external-nats" else 1)


def test_the_verifier_runs_its_own_image_and_the_rest_the_cpu_image():
    """Issue 20: the verifier's image carries BigCodeBench's libraries (infra/Dockerfile, target `verifier`)."""
    images = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in objects(rendered("default"), "Deployment")
    }
    assert images["rel-conductor-verifier"].startswith("ghcr.io/conductor-project/conductor-verifier:")
    assert images["rel-conductor-planner"].startswith("ghcr.io/conductor-project/conductor:")
