"""Merge and patch hooks on every Conductor service (conductor.hooked in _component.tpl), the official NATS chart's
pattern: an operator adds an ordinary container or pod change through `<service>.container` and
`<service>.podTemplate` instead of waiting for a new key."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml
from helm_python.errors import HelmRenderError, HelmValuesError

from tests.deploy.chart import CHART_DIR, KUBE_VERSION, chart, named, render

SERVICES = {
    "planner": "planner",
    "executor": "executor",
    "workerAdapter": "worker-adapter",
    "verifier": "verifier",
    "gateway": "gateway",
}
SIDECAR = {
    "name": "log-shipper",
    "image": "busybox:1.37",
    "args": ["sleep", "infinity"],
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    },
}


def _hooks() -> dict:
    return {
        "container": {
            "merge": {"stdin": True, "resources": {"limits": {"cpu": "2"}}},
            "patch": [
                {"op": "add", "path": "/env/-", "value": {"name": "GODEBUG", "value": "madvdontneed=1"}}
            ],
        },
        "podTemplate": {
            "merge": {"metadata": {"annotations": {"team": "ml"}}, "spec": {"priorityClassName": "high"}},
            "patch": [
                {"op": "add", "path": "/spec/containers/-", "value": SIDECAR},
                {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 30},
            ],
        },
    }


@pytest.mark.parametrize("key", SERVICES)
def test_container_and_pod_hooks_show_up_in_the_deployment(key):
    values = {"gateway": {"enabled": True}}
    values[key] = {**values.get(key, {}), **_hooks()}
    chart().validate_schema(values)
    docs = render(values)
    deployment = named(docs, "Deployment", f"rel-conductor-{SERVICES[key]}")
    kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)
    pod = deployment["spec"]["template"]
    main, sidecar = pod["spec"]["containers"]
    assert sidecar == SIDECAR and main["name"] == SERVICES[key]
    assert main["stdin"] is True and {"name": "GODEBUG", "value": "madvdontneed=1"} == main["env"][-1]
    assert (
        main["resources"]["limits"]["cpu"] == "2" and "memory" in main["resources"]["limits"]
    )  # merged, not replaced
    assert any(e["name"] == "NATS_URL" for e in main["env"])  # the chart's own entries stay
    assert (
        pod["metadata"]["annotations"]["team"] == "ml" and "checksum/pool" in pod["metadata"]["annotations"]
    )
    assert pod["metadata"]["labels"]["conductor.io/nats-client"] == "true"
    assert pod["spec"]["priorityClassName"] == "high" and pod["spec"]["terminationGracePeriodSeconds"] == 30
    # The hooks are that service's only.
    for other, name in SERVICES.items():
        if other != key:
            spec = named(docs, "Deployment", f"rel-conductor-{name}")["spec"]["template"]["spec"]
            assert len(spec["containers"]) == 1 and "priorityClassName" not in spec, other


def test_without_hooks_the_deployment_is_as_rendered():
    spec = named(render({}), "Deployment", "rel-conductor-executor")["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["executor"] and spec[
        "terminationGracePeriodSeconds"
    ] == 120


def test_a_patch_on_a_missing_path_fails_the_render_and_a_malformed_one_the_schema():
    with pytest.raises(HelmRenderError, match="does not exist"):
        render(
            {"planner": {"podTemplate": {"patch": [{"op": "replace", "path": "/spec/nope/x", "value": 1}]}}}
        )
    with pytest.raises(HelmValuesError, match="/planner/container/patch/0"):
        chart().validate_schema({"planner": {"container": {"patch": [{"op": "append", "path": "/env/-"}]}}})
    with pytest.raises(HelmValuesError, match="/planner/podTemplate"):
        chart().validate_schema({"planner": {"podTemplate": {"patches": []}}})


def test_the_readme_example_renders_and_validates():
    readme = (CHART_DIR / "README.md").read_text()
    section = readme[readme.index("## Merge and patch hooks") :]
    values = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    chart().validate_schema(values)
    deployment = named(render(values), "Deployment", "rel-conductor-executor")
    kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)
    spec = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["executor", "log-shipper"]
    assert {"name": "corporate-ca", "configMap": {"name": "corporate-ca"}} in spec["volumes"]
