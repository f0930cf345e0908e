"""Security properties of the rendered manifests: pod hardening, the verifier's stated exceptions, network reach,
probes on the real health endpoints, disruption budgets, GPU placement, secrets, the helm test hook."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from conductor.access import RESPONSE_WINDOW_S, chart_values
from conductor.liveness import MIN_BEAT_S
from conductor.probes import ProbeServer
from schemas.learner import POLICY_SUBJECT_PREFIX, TRAIN_SUBJECT
from schemas.plan import PLAN_SUBJECT
from schemas.rollout import ROLLOUT_SUBJECT
from schemas.solve import (
    CANCEL_SUBJECT_PREFIX,
    PROGRESS_SUBJECT_PREFIX,
    SOLVE_SUBJECT,
    cancel_subject,
    solve_subject,
)
from schemas.tasks import DEAD_SUBJECT_PREFIX, RESULT_SUBJECT_PREFIX, SUBMIT_SUBJECT
from schemas.verify import VERIFY_SUBJECT
from schemas.work import WORK_SUBJECT
from tests.deploy.chart import CASES, CHART_DIR, named, nats_users, objects, pod_specs, render, rendered

SERVICES = ["planner", "executor", "worker-adapter", "verifier"]
VERIFIER_EXCEPTIONS = {
    "seccompProfile": {"type": "Unconfined"},
    "appArmorProfile": {"type": "Unconfined"},
    "procMount": "Unmasked",
}


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return spec.get("initContainers", []) + spec["containers"]


@pytest.mark.parametrize("case", CASES)
def test_every_pod_is_non_root_read_only_and_drops_all_capabilities(case):
    for name, spec in pod_specs(rendered(case)):
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in containers(spec):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["capabilities"] == {"drop": ["ALL"]}, (name, c["name"])
            assert not sc.get("privileged"), (name, c["name"])
            exceptions = {k: sc[k] for k in VERIFIER_EXCEPTIONS if k in sc}
            if name == "rel-conductor-verifier":
                assert exceptions == VERIFIER_EXCEPTIONS and spec["hostUsers"] is False
            else:
                assert not exceptions and "hostUsers" not in spec, (name, exceptions)


def test_verifier_requires_the_layers_its_pod_can_give():
    verifier = named(rendered("default"), "Deployment", "rel-conductor-verifier")
    env = {e["name"]: e.get("value") for e in verifier["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CONDUCTOR_SANDBOX_REQUIRE"] == "netns,pidns,rofs,hidden,env,rlimits,seccomp"


def test_verifier_without_sandbox_has_no_exceptions_and_refuses_code():
    docs = render({"verifier": {"sandbox": {"enabled": False}}})
    spec = named(docs, "Deployment", "rel-conductor-verifier")["spec"]["template"]["spec"]
    sc = spec["containers"][0]["securityContext"]
    assert "hostUsers" not in spec and not set(VERIFIER_EXCEPTIONS) & set(sc)
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["CONDUCTOR_SANDBOX_BACKEND"] == "none" and env["CONDUCTOR_SANDBOX_REQUIRE"] == "1"


# --- NetworkPolicies: a small evaluator of which rules select a pod --------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] == "In" and labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def egress_rules(docs: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    rules = []
    for policy in objects(docs, "NetworkPolicy"):
        if _selects(policy["spec"]["podSelector"], labels) and "Egress" in policy["spec"]["policyTypes"]:
            rules += policy["spec"].get("egress", [])
    return rules


def pod_labels(docs: list[dict[str, Any]], name: str) -> dict[str, str]:
    return named(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]


def reaches_outside(rules: list[dict[str, Any]]) -> bool:
    """True when a rule allows an ipBlock (anything beyond pods of the cluster) on a port other than DNS."""
    return any(
        any("ipBlock" in peer for peer in rule.get("to", [])) or ("to" not in rule and _non_dns(rule))
        for rule in rules
    )


def _non_dns(rule: dict[str, Any]) -> bool:
    return any(p["port"] != 53 for p in rule.get("ports", [])) or not rule.get("ports")


@pytest.mark.parametrize("case", CASES)
def test_default_deny_covers_every_pod_of_the_release(case):
    docs = rendered(case)
    deny = named(docs, "NetworkPolicy", "rel-conductor-default-deny")["spec"]
    assert deny["podSelector"] == {"matchLabels": {"app.kubernetes.io/instance": "rel"}}
    assert deny["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in deny and "egress" not in deny


@pytest.mark.parametrize("case", CASES)
def test_only_the_worker_adapter_reaches_provider_apis(case):
    docs = rendered(case)
    adapter = egress_rules(docs, pod_labels(docs, "rel-conductor-worker-adapter"))
    assert any(
        any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in r.get("to", []))
        and {"port": 443, "protocol": "TCP"} in r["ports"]
        for r in adapter
    )
    external_nats = case == "external-nats"
    for name in ["rel-conductor-planner", "rel-conductor-executor", "rel-conductor-verifier"]:
        rules = egress_rules(docs, pod_labels(docs, name))
        if external_nats:  # the external server is a peer the values name; only its ports are open
            rules = [r for r in rules if r.get("ports") != [{"port": 4222, "protocol": "TCP"}]]
        assert not reaches_outside(rules), (case, name, rules)


def test_verifier_egress_is_dns_and_nats_only():
    docs = rendered("default")
    rules = egress_rules(docs, pod_labels(docs, "rel-conductor-verifier"))
    for rule in rules:
        if "to" not in rule:
            assert {p["port"] for p in rule["ports"]} == {53}
        else:
            assert rule["to"] == [
                {
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "rel"}
                    }
                }
            ]
            assert rule["ports"] == [{"port": 4222, "protocol": "TCP"}]


def test_vllm_servers_accept_only_their_callers():
    docs = rendered("vllm-workers")
    worker = named(docs, "NetworkPolicy", "rel-conductor-vllm-qwen-coder")["spec"]
    callers = [
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for p in worker["ingress"][0]["from"]
    ]
    assert callers == ["worker-adapter"]
    policy = named(
        render({"vllm": {"servers": {"policy": {"enabled": True}}}}),
        "NetworkPolicy",
        "rel-conductor-vllm-policy",
    )
    callers = [
        p["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for p in policy["spec"]["ingress"][0]["from"]
    ]
    assert callers == ["planner"]  # the learner too when it loads adapters at run time (test_runtime_lora.py)


# --- probes, budgets, GPUs, secrets, the test hook --------------------------------------------------------------


def test_probes_hit_the_real_health_endpoints():
    probes = ProbeServer("127.0.0.1", 0, ready=lambda: False)
    assert probes.route("GET", "/healthz")[0] == 200 and probes.route("GET", "/readyz")[0] == 503
    docs = rendered("default")
    for name in SERVICES:
        spec = named(docs, "Deployment", f"rel-conductor-{name}")["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["CONDUCTOR_METRICS_PORT"] == "9464"  # an explicit port is strict: never silently moved


def test_every_service_has_a_disruption_budget_and_metrics_service():
    docs = rendered("default")
    budgets = {d["metadata"]["name"] for d in objects(docs, "PodDisruptionBudget")}
    assert {f"rel-conductor-{s}" for s in SERVICES} | {"rel-nats"} <= budgets
    for s in SERVICES:
        svc = named(docs, "Service", f"rel-conductor-{s}")
        assert svc["metadata"]["labels"]["conductor.io/metrics"] == "true"


def test_vllm_servers_are_gpu_workloads_with_a_model_cache():
    docs = rendered("vllm-workers")
    deploy = named(docs, "Deployment", "rel-conductor-vllm-qwen-coder")
    spec = deploy["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["image"].startswith("vllm/vllm-openai:v")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2 and "--tensor-parallel-size=2" in c["args"]
    assert spec["nodeSelector"] and spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["shm"]["emptyDir"]["medium"] == "Memory"
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "rel-conductor-vllm-qwen-coder-cache"
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1200


def test_learner_is_off_by_default_and_a_gpu_workload_when_on():
    assert not [d for d in rendered("default") if "learner" in d["metadata"]["name"]]
    docs = rendered("gpu-learner")
    learner = named(docs, "Deployment", "rel-conductor-learner")
    spec = learner["spec"]["template"]["spec"]
    assert learner["spec"]["strategy"] == {"type": "Recreate"} and learner["spec"]["replicas"] == 1
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    claim = named(docs, "PersistentVolumeClaim", "rel-conductor-learner-checkpoints")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    role = named(docs, "Role", "rel-conductor-learner")
    patch = [r for r in role["rules"] if "patch" in r["verbs"]]
    assert patch == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["rel-conductor-vllm-policy"],
            "verbs": ["get", "patch"],
        }
    ]
    policy = named(docs, "Deployment", "rel-conductor-vllm-policy")["spec"]["template"]["spec"]
    assert {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True} in policy["containers"][0][
        "volumeMounts"
    ]


def test_api_keys_reach_the_worker_adapter_only():
    docs = render({"apiKeys": {"values": {"OPENAI_API_KEY": "sk-test"}}})
    for s in SERVICES:
        (c,) = named(docs, "Deployment", f"rel-conductor-{s}")["spec"]["template"]["spec"]["containers"]
        got = [e["secretRef"]["name"] for e in c.get("envFrom", [])]
        assert got == (["rel-conductor-api-keys"] if s == "worker-adapter" else []), s
    assert named(docs, "Secret", "rel-conductor-api-keys")["stringData"] == {"OPENAI_API_KEY": "sk-test"}


def test_tls_switches_every_client_to_tls_with_the_ca():
    docs = rendered("tls")
    for name, spec in pod_specs(docs):
        if name.startswith("rel-nats"):
            continue
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["NATS_URL"].startswith("tls://") and env["SSL_CERT_FILE"] == "/etc/conductor/tls/ca.crt", (
            name
        )
    conf = named(docs, "ConfigMap", "rel-nats-config")["data"]["nats.conf"]
    assert (
        '"cert_file": "/etc/nats-certs/nats/tls.crt"' in conf and '"routes"' in conf
    )  # 3 replicas: a cluster
    server = named(docs, "StatefulSet", "rel-nats")["spec"]["template"]["spec"]
    (mount,) = [
        m for m in server["containers"][0]["volumeMounts"] if m["mountPath"] == "/etc/nats-certs/nats"
    ]
    (volume,) = [v for v in server["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "conductor-nats-tls"  # the Secret whose ca.crt the clients trust


def test_helm_test_solves_through_the_services_as_the_client_user():
    (pod,) = objects(rendered("default"), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    assert "conductor" in c["args"][0] and "solve" in c["args"][0]
    url = next(e["value"] for e in c["env"] if e["name"] == "NATS_URL")
    assert url.startswith("nats://client:$(NATS_PASSWORD)@rel-nats.ai.svc:4222")
    assert pod["metadata"]["labels"]["conductor.io/nats-client"] == "true"


def test_service_permissions_follow_the_subjects_in_schemas():
    auth = named(rendered("default"), "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    users = nats_users(auth)
    assert users["planner"]["subscribe"] == [PLAN_SUBJECT, f"{POLICY_SUBJECT_PREFIX}.>", "_INBOX.planner.>"]
    assert not any(s.startswith("$O.") for s in users["planner"]["publish"])  # policy versions: read-only
    learner = nats_users(
        named(rendered("gpu-learner"), "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    )
    assert f"{POLICY_SUBJECT_PREFIX}.>" in learner["learner"]["publish"]
    # Only its rollouts' outcomes (executors alone publish them); the work items it sends are read by nobody.
    assert learner["learner"]["subscribe"] == [f"{ROLLOUT_SUBJECT}.results.>", "_INBOX.learner.>"]
    assert not any(
        s.startswith(f"{ROLLOUT_SUBJECT}.work") for user in users.values() for s in user["subscribe"]
    )
    assert TRAIN_SUBJECT not in users["client"]["publish"]  # training is an operator's act (issue 19, item 2)
    assert users["trainer"]["publish"] == [TRAIN_SUBJECT]
    assert users["worker-adapter"]["subscribe"] == [WORK_SUBJECT, "_INBOX.worker-adapter.>"]
    assert (users["verifier"]["publish"], users["verifier"]["subscribe"]) == (
        [],
        [VERIFY_SUBJECT, "_INBOX.verifier.>"],
    )
    assert users["executor"]["subscribe"] == [
        f"{SOLVE_SUBJECT}.*",
        ROLLOUT_SUBJECT,
        f"{CANCEL_SUBJECT_PREFIX}.>",
        "_INBOX.executor.>",
    ]
    cancels = [s for s in users["client"]["publish"] if s.startswith(CANCEL_SUBJECT_PREFIX)]
    assert cancels == [
        cancel_subject("client", ">")
    ]  # a tenant cancels only its own tasks (issue 19, items 3-4)
    wanted = {
        PLAN_SUBJECT,
        WORK_SUBJECT,
        VERIFY_SUBJECT,
        f"{PROGRESS_SUBJECT_PREFIX}.>",
        f"{RESULT_SUBJECT_PREFIX}.>",
        f"{DEAD_SUBJECT_PREFIX}.>",
    }
    assert wanted <= set(users["executor"]["publish"])
    assert (
        f"{SUBMIT_SUBJECT}.client" in users["client"]["publish"]
        and solve_subject("client") in users["client"]["publish"]
    )
    assert users["client"]["subscribe"][:2] == [
        f"{PROGRESS_SUBJECT_PREFIX}.client.>",
        f"{RESULT_SUBJECT_PREFIX}.client.>",
    ]
    for name, perms in users.items():  # nobody may publish or subscribe to everything, or to every inbox
        assert ">" not in perms["publish"] + perms["subscribe"], name
        assert not any(s.startswith("_INBOX.") for s in perms["publish"]), (
            name
        )  # replies: allow_responses only
        assert [s for s in perms["subscribe"] if s.startswith("_INBOX")] == [f"_INBOX.{name}.>"], name


def test_chart_permissions_are_the_ones_conductor_access_declares():
    """values.yaml's nats blocks are generated from conductor/access.py (infra/chart_permissions.py): what the
    chart ships is what the embedded server of `demo`/`serve all` enforces and the tests exercise."""
    import importlib.util

    script = CHART_DIR.parents[1] / "infra" / "chart_permissions.py"
    spec = importlib.util.spec_from_file_location("chart_permissions", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (CHART_DIR / "values.yaml").read_text(encoding="utf-8")
    assert text == module.render(text), "stale: run infra/chart_permissions.py, then infra/chart_schema.py"
    values = yaml.safe_load(text)
    for block, entry in chart_values().items():
        user = block.removeprefix("auth.users.")
        if block == "auth.tenant":
            got = values["auth"]["tenant"]
        else:
            got = values["auth"]["users"][user] if block.startswith("auth.users.") else values[block]["nats"]
        assert got == entry, block


def test_each_listed_tenant_is_a_user_on_its_own_name_only():
    """Issue 19, item 4: auth.tenants become users with the client's permissions on their own names, exactly what
    conductor/access.py grants a tenant of the embedded server; a name that is not one, or is taken, is refused."""
    from conductor.access import permissions, role_of

    auth = named(render({"auth": {"tenants": ["acme", "beta-2"]}}), "ConfigMap", "rel-nats-auth")
    users = nats_users(auth["data"]["authorization.conf"])
    for tenant in ("acme", "beta-2"):
        want = permissions(role_of(tenant), user=tenant)
        assert (users[tenant]["publish"], users[tenant]["subscribe"]) == (
            list(want.publish),
            list(want.subscribe),
        )
    assert "conductor.results.beta-2.>" not in users["acme"]["subscribe"]
    assert "{tenant}" not in str(users)
    for bad in (["a.b"], ["executor"], ["client"]):
        with pytest.raises(Exception, match="tenants"):
            render({"auth": {"tenants": bad}})


def _account(conf: str, name: str) -> str:
    """The body of one account of a rendered accounts block."""
    return conf.split(f"\n  {name} {{", 1)[1].split("\n  }", 1)[0]


def test_each_outside_user_is_alone_in_an_account_importing_its_doors_only():
    """Issue 34, item 1: the services share the account that owns JetStream; the client, the trainer, the gateway
    and each listed tenant are alone in their own accounts, importing exactly conductor/access.py's doors, each
    exported to that one account; only the gateway's account has JetStream (its spend records)."""
    from conductor.access import SERVICES_ACCOUNT, doors, role_of

    values = {"auth": {"tenants": ["acme", "beta-2"]}, "gateway": {"enabled": True}}
    conf = named(render(values), "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    services = _account(conf, SERVICES_ACCOUNT)
    assert "jetstream: enabled" in services
    assert set(re.findall(r'user: "([^"]+)"', services)) == {
        "executor",
        "planner",
        "worker-adapter",
        "verifier",
    }
    for user in ("client", "trainer", "gateway", "acme", "beta-2"):
        body = _account(conf, f'"{user}"')
        assert re.findall(r'user: "([^"]+)"', body) == [user]
        assert ("jetstream: enabled" in body) is (user == "gateway")
        imported = re.findall(r'subject: "([^"]+)"', body)
        assert imported == [d.subject for d in doors(role_of(user), tenant=user)], user
    exports = dict(re.findall(r'\{ \w+: "([^"]+)", accounts: \[([^\]]*)\]', services))
    assert exports["conductor.solve.acme"] == '"acme"'
    assert exports["$JS.API.DIRECT.GET.KV_CONDUCTOR_RESULTS.$KV.CONDUCTOR_RESULTS.beta-2.>"] == '"beta-2"'
    assert exports["conductor.learner.train"] == '"trainer"'
    assert not any(s.startswith(("$KV.", "$O.")) for s in exports)


def test_responders_answer_through_allow_responses_long_enough_for_beats():
    auth = named(rendered("gpu-learner"), "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    responses = dict(
        re.findall(r'user: "([^"]+)"[^}]*?\}[^}]*?\}\s*allow_responses: \{ max: (\d+)', auth, re.S)
    )
    assert set(responses) == {"planner", "executor", "worker-adapter", "verifier"}, responses
    for user, most in responses.items():
        window = RESPONSE_WINDOW_S[user]
        assert int(most) >= window / MIN_BEAT_S and f'expires: "{window}s"' in auth, user


def test_gateway_is_one_values_block_with_an_http_door():
    docs = rendered("tls")
    spec = named(docs, "Deployment", "rel-conductor-gateway")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in c["ports"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["CONDUCTOR_GATEWAY_HOST"] == "0.0.0.0" and env["CONDUCTOR_GATEWAY_PORT"] == "8080"
    assert env["CONDUCTOR_GATEWAY_KEYS_FILE"] == "/etc/conductor/files/conductor-gateway-keys/keys.toml"
    assert env["NATS_URL"].startswith("tls://gateway:")
    svc = named(docs, "Service", "rel-conductor-gateway")
    assert {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"} in svc["spec"]["ports"]
    door = named(docs, "NetworkPolicy", "rel-conductor-gateway-http")["spec"]
    assert door["ingress"] == [
        {
            "from": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
            ],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }
    ]
    assert not reaches_outside(egress_rules(docs, pod_labels(docs, "rel-conductor-gateway")))
    assert "rel-conductor-gateway" in {d["metadata"]["name"] for d in objects(docs, "PodDisruptionBudget")}
    assert not [d for d in rendered("default") if "gateway" in d["metadata"]["name"]]


def test_traces_go_to_the_configured_collector_only():
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in str(rendered("default"))
    docs = rendered("vllm-workers")
    for name in ["planner", "executor", "worker-adapter", "verifier"]:
        (c,) = named(docs, "Deployment", f"rel-conductor-{name}")["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability.svc:4318"
        assert env["OTEL_SERVICE_NAME"] == f"conductor-{name}"
    egress = named(docs, "NetworkPolicy", "rel-conductor-otlp")["spec"]["egress"]
    assert egress[0]["ports"] == [{"port": 4318, "protocol": "TCP"}]
    assert "ipBlock" not in str(egress)


def test_no_user_gets_the_whole_jetstream_api():
    auth = named(rendered("gpu-learner"), "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    for name, perms in nats_users(auth).items():
        assert not {"$JS.API.>", "$JS.>", "$KV.>", "$O.>"} & set(perms["publish"] + perms["subscribe"]), name
