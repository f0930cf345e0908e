"""`conductor status` and the policy roll through the real kubernetes client, against a local server speaking the
Kubernetes API (tests/deploy/kubeapi.py) that holds the chart's own rendered workloads."""

from __future__ import annotations

import copy
import io
import json
import threading
import time
from contextlib import redirect_stdout

import nats
import pytest
from nats.js.api import ConsumerConfig, RetentionPolicy, StreamConfig

from conductor.app.cli import main
from conductor.app.status import intake_lag
from conductor.kube import KubeError, api_client, roll_policy_server, wait_rolled, workloads
from schemas.tasks import Names
from tests.deploy.chart import NAMESPACE, RELEASE, rendered
from tests.deploy.kubeapi import STRATEGIC, KubeApi

POLICY = "rel-conductor-vllm-policy"


def _pod(workload: dict, i: int, ready: bool, restarts: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload['metadata']['name']}-{i}",
            "namespace": NAMESPACE,
            "labels": dict(workload["spec"]["template"]["metadata"]["labels"]),
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [
                {
                    "name": "c",
                    "ready": ready,
                    "restartCount": restarts,
                    "image": "x",
                    "imageID": "",
                    "started": True,
                }
            ],
        },
    }


def _as_served(obj: dict) -> dict:
    """What the API server returns for a manifest: quantities (resources) come back as strings."""
    obj = copy.deepcopy(obj)
    for c in obj["spec"]["template"]["spec"]["containers"]:
        for part in ("requests", "limits"):
            if part in c.get("resources", {}):
                c["resources"][part] = {k: str(v) for k, v in c["resources"][part].items()}
    return obj


@pytest.fixture
def cluster():
    """The gpu-learner rendering as a live cluster: everything ready except one verifier pod."""
    with KubeApi() as api:
        for doc in rendered("gpu-learner"):
            if doc["kind"] not in {"Deployment", "StatefulSet"}:
                continue
            obj = _as_served(doc)
            obj["metadata"] |= {"namespace": NAMESPACE, "generation": 1}
            want = obj["spec"].get("replicas", 2)
            obj["spec"]["replicas"] = want
            sick = obj["metadata"]["name"] == "rel-conductor-verifier"
            obj["status"] = {
                "observedGeneration": 1,
                "replicas": want,
                "readyReplicas": want - sick,
                "updatedReplicas": want,
                "availableReplicas": want - sick,
            }
            api.add(NAMESPACE, "deployments" if doc["kind"] == "Deployment" else "statefulsets", obj)
            for i in range(want):
                not_ready = sick and i == 0
                api.add(NAMESPACE, "pods", _pod(obj, i, ready=not not_ready, restarts=3 if not_ready else 0))
        yield api


@pytest.fixture
def kubeconfig(cluster, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [{"name": "test", "cluster": {"server": cluster.url}}],
                "users": [{"name": "test", "user": {"token": cluster.token}}],
                "contexts": [
                    {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": NAMESPACE}}
                ],
            }
        )
    )
    return str(path)


def test_workloads_per_service_with_pods_and_readiness(cluster, kubeconfig):
    found = workloads(api_client(kubeconfig), NAMESPACE, RELEASE)
    by = {w.component: w for w in found}
    assert set(by) == {"planner", "executor", "worker-adapter", "verifier", "learner", "vllm-policy", "nats"}
    assert by["nats"].kind == "StatefulSet" and by["executor"].kind == "Deployment"
    assert by["verifier"].ready == 1 and by["verifier"].desired == 2 and not by["verifier"].healthy
    sick = [p for p in by["verifier"].pods if not p.ready]
    assert [p.restarts for p in sick] == [3] and sick[0].phase == "Running"
    assert all(w.healthy for c, w in by.items() if c != "verifier")
    assert all(len(w.pods) == w.desired for w in found), "pods are matched to their own workload's selector"


def test_other_releases_are_not_listed(cluster, kubeconfig):
    stranger = copy.deepcopy(cluster.get(NAMESPACE, "deployments", "rel-conductor-planner"))
    stranger["metadata"]["name"] = "other-conductor-planner"
    stranger["metadata"]["labels"]["app.kubernetes.io/instance"] = "other"
    cluster.add(NAMESPACE, "deployments", stranger)
    names = {w.name for w in workloads(api_client(kubeconfig), NAMESPACE, RELEASE)}
    assert "other-conductor-planner" not in names


def test_roll_policy_server_to_a_checkpoint(cluster, kubeconfig):
    api = api_client(kubeconfig)
    before = cluster.get(NAMESPACE, "deployments", POLICY)
    (container,) = before["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["vllm", "serve", "$(POLICY_MODEL)"]  # the chart serves what the roll sets
    generation = roll_policy_server(api, NAMESPACE, POLICY, "/checkpoints/v7", "v7")
    assert generation == 2
    after = cluster.get(NAMESPACE, "deployments", POLICY)
    (container,) = after["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["POLICY_MODEL"] == "/checkpoints/v7"
    assert env["HF_HOME"] == "/models/huggingface", "other env vars survive the merge"
    assert after["spec"]["template"]["metadata"]["annotations"]["conductor.io/policy-version"] == "v7"
    assert (
        "PATCH",
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{POLICY}",
        STRATEGIC,
    ) in cluster.requests

    done = threading.Event()
    waiter = threading.Thread(
        target=lambda: (wait_rolled(api, NAMESPACE, POLICY, generation, 10, 0.05), done.set())
    )
    waiter.start()
    time.sleep(0.3)
    assert not done.is_set(), "the roll is not done before the controller rolled the pods"
    cluster.complete_rollout(NAMESPACE, POLICY)
    waiter.join(5)
    assert done.is_set()


def test_roll_refused_by_rbac_is_a_clear_error(cluster, kubeconfig):
    cluster.forbidden.add(POLICY)
    with pytest.raises(KubeError, match=r"rolling ai/rel-conductor-vllm-policy to v8: 403"):
        roll_policy_server(api_client(kubeconfig), NAMESPACE, POLICY, "/checkpoints/v8", "v8")


def test_wait_rolled_gives_up_with_the_reason(cluster, kubeconfig):
    api = api_client(kubeconfig)
    generation = roll_policy_server(api, NAMESPACE, POLICY, "/checkpoints/v9", "v9")
    with pytest.raises(KubeError, match="did not finish rolling"):
        wait_rolled(api, NAMESPACE, POLICY, generation, timeout_s=0.2, poll_s=0.05)


def test_bad_credentials_and_missing_kubeconfig(cluster, kubeconfig, tmp_path):
    cluster.token = "rotated"
    with pytest.raises(KubeError, match="401"):
        workloads(api_client(kubeconfig), NAMESPACE, RELEASE)
    with pytest.raises(KubeError, match="no Kubernetes credentials"):
        api_client(str(tmp_path / "missing"))


def test_status_command_json(kubeconfig):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            [
                "status",
                "--kubeconfig",
                kubeconfig,
                "-n",
                NAMESPACE,
                "--release",
                RELEASE,
                "--json",
                "--no-nats",
            ]
        )
    assert code == 1  # a verifier replica is not ready
    status = json.loads(out.getvalue())
    assert {w["component"] for w in status["workloads"]} >= {"executor", "verifier"}
    assert status["intake"] is None and "skipped" in status["intake_error"]


@pytest.mark.nats
async def test_intake_lag_from_the_executor_consumer(nats_url, subject_prefix, kubeconfig, monkeypatch):
    names = Names.for_prefix(subject_prefix)
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name=names.tasks_stream, subjects=[names.submit_subject], retention=RetentionPolicy.WORK_QUEUE
            )
        )
        with pytest.raises(LookupError, match="no executor ran"):
            await intake_lag(nc, subject_prefix)
        await js.add_consumer(names.tasks_stream, ConsumerConfig(durable_name="executor"))
        for i in range(3):
            await js.publish(names.submit_subject, b"{}", headers={"Nats-Msg-Id": f"t{i}"})
        lag = await intake_lag(nc, subject_prefix)
        assert (lag.pending, lag.in_flight, lag.redelivered) == (3, 0, 0)
    finally:
        await nc.close()
    monkeypatch.setenv("NATS_URL", nats_url)
    monkeypatch.setenv("CONDUCTOR_SUBJECT_PREFIX", subject_prefix)
    out = io.StringIO()
    import asyncio

    def run() -> int:
        with redirect_stdout(out):
            return main(
                ["status", "--kubeconfig", kubeconfig, "-n", NAMESPACE, "--release", RELEASE, "--json"]
            )

    await asyncio.to_thread(run)
    assert json.loads(out.getvalue())["intake"] == {
        "stream": names.tasks_stream,
        "pending": 3,
        "in_flight": 0,
        "redelivered": 0,
    }


def _finished_run(root, steps: int = 12):
    """A run directory as the pipeline leaves it after GRPO (no training here: the roll needs only the paths)."""
    import msgspec

    from services.learner.config import OutputSection, parse_config

    out = root / "jobs" / "j-7"
    (out / "policy").mkdir(parents=True)
    (out / "stages.json").write_text(json.dumps({"base": {}, "grpo": {"policy": str(out / "policy")}}))
    config = parse_config(f'name = "smollm2-sim"\n[model]\nsource = "tiny"\n[grpo]\nsteps = {steps}\n')
    return msgspec.structs.replace(config, output=OutputSection(dir=str(out))), out


def _learner(kubeconfig, root, **extra):
    from services.learner.app import create_service

    env = {
        "CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(root),
        "CONDUCTOR_POLICY_DEPLOYMENT": POLICY,
        "CONDUCTOR_KUBE_NAMESPACE": NAMESPACE,
        "CONDUCTOR_KUBECONFIG": kubeconfig,
        **extra,
    }
    return create_service(env)


async def test_the_learner_rolls_the_policy_server_to_a_finished_jobs_checkpoint(
    cluster, kubeconfig, tmp_path, monkeypatch
):
    """Issue 13, item 5: after a job, with run-time LoRA loading off, the learner points the chart's policy vLLM
    Deployment at the job's full checkpoint through the real kubernetes client, and waits for the rollout."""
    import asyncio

    from services.learner import app

    monkeypatch.setattr(app, "ROLL_POLL_S", 0.05)
    config, out = _finished_run(tmp_path)
    svc = _learner(kubeconfig, tmp_path)
    release = asyncio.create_task(svc.release("j-7", config))
    patch = ("PATCH", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{POLICY}", STRATEGIC)
    for _ in range(200):
        if patch in cluster.requests:
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    assert not release.done(), "the learner waits for the controller to roll the pods"
    cluster.complete_rollout(NAMESPACE, POLICY)
    assert await asyncio.wait_for(release, 10) is None
    dep = cluster.get(NAMESPACE, "deployments", POLICY)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["POLICY_MODEL"] == str((out / "policy").resolve())  # the same path in the policy pod's mount
    assert (
        dep["spec"]["template"]["metadata"]["annotations"]["conductor.io/policy-version"] == "smollm2-sim@12"
    )


async def test_a_refused_roll_is_the_jobs_error(cluster, kubeconfig, tmp_path):
    cluster.forbidden.add(POLICY)
    config, _ = _finished_run(tmp_path)
    error = await _learner(kubeconfig, tmp_path).release("j-8", config)
    assert (
        error is not None and error.code == "unavailable" and "403" in error.message and not error.retryable
    )
    assert cluster.get(NAMESPACE, "deployments", POLICY)["metadata"]["generation"] == 1
