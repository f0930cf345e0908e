"""The chart's Prometheus Operator objects (ServiceMonitor, PodMonitor, PrometheusRule) checked against the
operator's published CRD schemas, which kubernetes-validate does not ship (tests/deploy/test_chart.py checks them by
shape): PyPI's cloudcoil-models-prometheus-operator holds pydantic models generated from those CRDs (types, enums,
required fields, patterns). Its models ignore unknown fields, so a field the CRD does not declare is caught by
comparing what the model read back with what the chart rendered. `make test-ops` installs the package."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from tests.deploy.chart import CASES, rendered

models = pytest.importorskip(
    "cloudcoil.models.prometheus_operator.v1",
    reason="`make test-ops` installs cloudcoil-models-prometheus-operator",
)
pytestmark = pytest.mark.ops
KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def _operator_objects() -> list[tuple[str, dict[str, Any]]]:
    return [
        (case, doc)
        for case in CASES
        for doc in rendered(case)
        if doc["apiVersion"].startswith("monitoring.coreos.com/")
    ]


def test_the_chart_renders_each_kind():
    assert {doc["kind"] for _, doc in _operator_objects()} == set(KINDS)


@pytest.mark.parametrize(
    ("case", "doc"),
    _operator_objects(),
    ids=[f"{case}-{doc['kind']}-{doc['metadata']['name']}" for case, doc in _operator_objects()],
)
def test_object_matches_its_crd_schema(case: str, doc: dict[str, Any]):
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", case
    model = getattr(models, doc["kind"]).model_validate(doc)  # raises on a wrong type, enum or missing field
    read = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert read == doc, f"{case}: fields the {doc['kind']} CRD does not declare"


def test_an_undeclared_field_and_a_wrong_type_are_caught():
    doc = next(d for _, d in _operator_objects() if d["kind"] == "ServiceMonitor")
    typo = {**doc, "spec": {**doc["spec"], "endpoint": doc["spec"]["endpoints"]}}
    read = models.ServiceMonitor.model_validate(typo).model_dump(
        by_alias=True, exclude_unset=True, mode="json"
    )
    assert read != typo
    rule = next(d for _, d in _operator_objects() if d["kind"] == "PrometheusRule")
    group = {
        **rule["spec"]["groups"][0],
        "rules": [{"alert": "A", "expr": "up", "for": 5}],
    }  # a duration is a string
    with pytest.raises(pydantic.ValidationError, match="for"):
        models.PrometheusRule.model_validate({**rule, "spec": {"groups": [group]}})
