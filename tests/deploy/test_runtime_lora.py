"""Run-time LoRA loading in the chart (vllm.servers.policy.runtimeLora): the policy vLLM server started with
--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, the learner told to POST adapters to it (the settings it
reads: services/learner/app.py LearnerSettings), a NetworkPolicy path from the learner to the server's port — all
only when the value is on; the roll (service-account token, Role, API-server egress) only when it is off."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
from helm_python.errors import HelmRenderError, HelmValuesError

from services.learner.app import LearnerSettings
from tests.deploy.chart import case_values, chart, named, objects, render, rendered
from tests.deploy.test_chart import KUBE_VERSION
from tests.deploy.test_chart_security import _selects, egress_rules, pod_labels

SERVER, LEARNER, PLANNER = "rel-conductor-vllm-policy", "rel-conductor-learner", "rel-conductor-planner"
LORA_ARGS = ("--enable-lora", "--max-lora-rank", "--max-loras")
LEARNER_LORA_ENV = {"CONDUCTOR_POLICY_RUNTIME_LORA", "CONDUCTOR_POLICY_SERVER_URL"}
ROLL_ENV = {"CONDUCTOR_POLICY_DEPLOYMENT", "CONDUCTOR_KUBE_NAMESPACE"}


def _values(**lora: Any) -> dict[str, Any]:
    """The learner and the policy server on, runtimeLora as given."""
    return {
        "learner": {"enabled": True},
        "vllm": {"servers": {"policy": {"enabled": True, "runtimeLora": lora}}},
    }


def _container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (c,) = named(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"]
    return c


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _lora_args(container: dict[str, Any]) -> list[str]:
    return [a for a in container["args"] if a.startswith(LORA_ARGS)]


def _reaches(docs: list[dict[str, Any]], source: str, target: str, port: int) -> bool:
    """True when the NetworkPolicies let `source`'s pods open `port` on `target`'s pods: an egress rule selecting
    the source and naming the target, and an ingress rule selecting the target and naming the source."""
    src, dst = pod_labels(docs, source), pod_labels(docs, target)

    def names(rule: dict[str, Any], key: str, labels: dict[str, str]) -> bool:
        peers = [p for p in rule.get(key, []) if "podSelector" in p and _selects(p["podSelector"], labels)]
        return bool(peers) and {"port": port, "protocol": "TCP"} in rule.get("ports", [])

    out = any(names(rule, "to", dst) for rule in egress_rules(docs, src))
    into = any(
        names(rule, "from", src)
        for policy in objects(docs, "NetworkPolicy")
        if _selects(policy["spec"]["podSelector"], dst) and "Ingress" in policy["spec"]["policyTypes"]
        for rule in policy["spec"].get("ingress", [])
    )
    return out and into


def _validate(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["kind"] not in {"ScaledObject", "ServiceMonitor"}:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_on_the_server_gets_the_flags_and_the_env_vllm_documents():
    docs = rendered("runtime-lora")
    server = _container(docs, SERVER)
    assert _lora_args(server) == ["--enable-lora", "--max-lora-rank=16", "--max-loras=2"]
    assert _env(server)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    # the learner POSTs a path on its checkpoint volume: the server mounts the same volume at the same path
    assert {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True} in server["volumeMounts"]
    learner_mounts = {m["name"]: m["mountPath"] for m in _container(docs, LEARNER)["volumeMounts"]}
    assert learner_mounts["checkpoints"] == "/checkpoints"
    assert _env(_container(docs, LEARNER))["CONDUCTOR_LEARNER_CHECKPOINT_DIR"] == "/checkpoints"


def test_on_the_learner_reads_the_switch_and_the_servers_url():
    docs = rendered("runtime-lora")
    env = _env(_container(docs, LEARNER))
    assert LEARNER_LORA_ENV <= set(env) and not ROLL_ENV & set(env)
    settings = LearnerSettings.from_env({k: v for k, v in env.items() if isinstance(v, str)})
    assert settings.runtime_lora is True and settings.policy_deployment is None
    url = urlsplit(settings.policy_server_url or "")
    service = named(docs, "Service", SERVER)
    http = next(p for p in service["spec"]["ports"] if p["name"] == "http")
    assert (url.scheme, url.hostname, url.port, url.path) == ("http", SERVER, http["port"], "")


def test_on_the_learner_reaches_the_servers_port_and_loses_the_roll():
    docs = rendered("runtime-lora")
    assert _reaches(docs, LEARNER, SERVER, 8000) and _reaches(docs, PLANNER, SERVER, 8000)
    spec = named(docs, "Deployment", LEARNER)["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "rel-conductor"
    assert not objects(docs, "Role") and not objects(docs, "RoleBinding")
    assert not [p for p in objects(docs, "NetworkPolicy") if p["metadata"]["name"].endswith("kube-api")]


def test_off_nothing_of_it_and_the_roll_stays():
    docs = rendered("gpu-learner")  # the learner and the policy server, runtimeLora at its default (off)
    server, learner = _container(docs, SERVER), _container(docs, LEARNER)
    assert not _lora_args(server) and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in _env(server)
    assert not LEARNER_LORA_ENV & set(_env(learner)) and ROLL_ENV <= set(_env(learner))
    assert not _reaches(docs, LEARNER, SERVER, 8000) and _reaches(docs, PLANNER, SERVER, 8000)
    assert named(docs, "Role", "rel-conductor-learner")
    assert named(docs, "NetworkPolicy", "rel-conductor-learner-kube-api")
    # no roll either: the learner has no path to the server and no token
    docs = render(_values(enabled=False) | {"learner": {"enabled": True, "rollPolicyServer": False}})
    assert not _reaches(docs, LEARNER, SERVER, 8000) and not objects(docs, "Role")
    assert not (LEARNER_LORA_ENV | ROLL_ENV) & set(_env(_container(docs, LEARNER)))


def test_on_without_the_learner_serves_the_endpoints_but_wires_no_caller():
    values = _values(enabled=True)
    values["learner"]["enabled"] = False
    docs = render(values)
    _validate(docs)
    server = _container(docs, SERVER)
    assert _lora_args(server) == ["--enable-lora", "--max-lora-rank=64", "--max-loras=1"]  # the defaults
    policy = named(docs, "NetworkPolicy", SERVER)["spec"]
    callers = [
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in policy["ingress"][0]["from"]
    ]
    assert callers == ["planner"]


def test_worker_servers_never_get_lora():
    docs = rendered("vllm-workers")
    worker = _container(docs, "rel-conductor-vllm-qwen-coder")
    assert not _lora_args(worker) and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in _env(worker)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {
                "vllm": {
                    "servers": {
                        "coder": {
                            **case_values("vllm-workers")["vllm"]["servers"]["qwen-coder"],
                            "runtimeLora": {"enabled": True, "maxLoraRank": 16, "maxLoras": 1},
                        }
                    }
                }
            },
            r"vllm\.servers\.coder\.runtimeLora: only vllm\.servers\.policy",
        ),
        (
            {
                "vllm": {
                    "servers": {"policy": {"enabled": True, "runtimeLora": {"enabled": True}, "replicas": 2}}
                }
            },
            r"runtimeLora needs replicas: 1",
        ),  # one POST through the Service reaches one pod
        (
            {
                "vllm": {
                    "servers": {
                        "policy": {
                            "enabled": True,
                            "runtimeLora": {"enabled": True},
                            "extraArgs": ["--max-lora-rank", "64"],
                        }
                    }
                }
            },
            r"--max-lora-rank is set by runtimeLora",
        ),
        (
            {
                "vllm": {
                    "servers": {
                        "policy": {
                            "enabled": True,
                            "runtimeLora": {"enabled": True},
                            "extraArgs": ["--max-model-len", 8192, "--enable-lora"],
                        }
                    }
                }
            },
            r"--enable-lora is set by runtimeLora",
        ),
    ],
)
def test_conflicting_values_fail_loudly(values, message):
    with pytest.raises(HelmRenderError, match=message):
        chart().render(values, name="rel", namespace="ai")


@pytest.mark.parametrize(
    ("lora", "where"),
    [
        ({"maxLoraRank": -1}, "/vllm/servers/policy/runtimeLora/maxLoraRank"),
        ({"maxLoraRank": 48}, "/vllm/servers/policy/runtimeLora/maxLoraRank"),  # not a rank vLLM accepts
        ({"maxLoraRank": "64"}, "/vllm/servers/policy/runtimeLora/maxLoraRank"),
        ({"maxLoras": 0}, "/vllm/servers/policy/runtimeLora/maxLoras"),
        ({"enabled": "yes"}, "/vllm/servers/policy/runtimeLora/enabled"),
        ({"maxCpuLoras": 2}, "/vllm/servers/policy/runtimeLora"),
    ],
)
def test_schema_rejects_bad_runtime_lora_values(lora, where):
    with pytest.raises(HelmValuesError) as exc:
        chart().validate_schema(_values(**{"enabled": True, **lora}))
    assert where in str(exc.value)


def test_schema_accepts_every_rank_vllm_accepts():
    for rank in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        chart().validate_schema(_values(enabled=True, maxLoraRank=rank, maxLoras=4))
