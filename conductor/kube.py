"""The system acting on its own cluster through the kubernetes client: service status and the policy server's roll.

Two uses, both small: `conductor status` reads the release's workloads and pods (and, from NATS, the executor
intake's lag), and the learner rolls the policy vLLM Deployment to a new checkpoint when run-time adapter loading
is off (`roll_policy_server`). The chart's RBAC grants the learner exactly the calls made here.
The kubernetes package is the `kube` extra (also in `learner`): imported lazily, with a clear error when missing.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from typing import Any

import msgspec

INSTANCE = "app.kubernetes.io/instance"
COMPONENT = "app.kubernetes.io/component"
NAME = "app.kubernetes.io/name"
POLICY_CONTAINER = "vllm"
POLICY_MODEL_ENV = "POLICY_MODEL"  # the chart's vLLM command serves $(POLICY_MODEL)
POLICY_VERSION_ANNOTATION = "conductor.io/policy-version"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"


class KubeError(RuntimeError):
    """The cluster could not be read or changed; the message says which object and why."""


class PodState(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    phase: str
    ready: bool
    restarts: int
    node: str | None = None


class WorkloadState(msgspec.Struct, frozen=True, kw_only=True):
    """One Deployment or StatefulSet of the release, as `conductor status` shows it."""

    name: str
    kind: str
    component: str
    desired: int
    ready: int
    updated: int
    pods: list[PodState] = []

    @property
    def healthy(self) -> bool:
        return self.ready >= self.desired and self.updated >= self.desired


def api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient: in-cluster credentials inside a pod, else the kubeconfig (``KUBECONFIG`` or ~/.kube/config)."""
    try:
        from kubernetes import client, config
    except ImportError as exc:  # the `kube` extra is not installed
        raise KubeError("the kubernetes client is not installed: pip install 'conductor[kube]'") from exc
    try:
        if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config()
            return client.ApiClient()
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException as exc:
        raise KubeError(f"no Kubernetes credentials: {exc}") from exc


def _api_error(what: str, exc: Exception) -> KubeError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    return KubeError(f"{what}: {status or ''} {reason}".strip())


def workloads(api: Any, namespace: str, release: str) -> list[WorkloadState]:
    """Every Deployment and StatefulSet labelled with the release, with its pods, sorted by component."""
    from kubernetes import client

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    selector = f"{INSTANCE}={release}"
    try:
        found = [
            *(
                ("Deployment", d)
                for d in apps.list_namespaced_deployment(namespace, label_selector=selector).items
            ),
            *(
                ("StatefulSet", s)
                for s in apps.list_namespaced_stateful_set(namespace, label_selector=selector).items
            ),
        ]
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    except client.ApiException as exc:
        raise _api_error(f"listing release {release!r} in {namespace!r}", exc) from exc
    states = [_workload(kind, obj, pods) for kind, obj in found]
    return sorted(states, key=lambda w: (w.component, w.name))


def _workload(kind: str, obj: Any, pods: list[Any]) -> WorkloadState:
    labels = obj.metadata.labels or {}
    selector = obj.spec.selector.match_labels or {}
    mine = [p for p in pods if selector.items() <= (p.metadata.labels or {}).items()]
    status = obj.status
    return WorkloadState(
        name=obj.metadata.name,
        kind=kind,
        component=labels.get(COMPONENT) or labels.get(NAME) or obj.metadata.name,
        desired=obj.spec.replicas if obj.spec.replicas is not None else 1,
        ready=(status.ready_replicas or 0) if status else 0,
        updated=(status.updated_replicas or 0) if status else 0,
        pods=sorted((_pod(p) for p in mine), key=lambda p: p.name),
    )


def _pod(pod: Any) -> PodState:
    statuses = (pod.status.container_statuses or []) if pod.status else []
    conditions = (pod.status.conditions or []) if pod.status else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return PodState(
        name=pod.metadata.name,
        phase=(pod.status.phase if pod.status else None) or "Unknown",
        ready=ready,
        restarts=sum(s.restart_count or 0 for s in statuses),
        node=pod.spec.node_name if pod.spec else None,
    )


def roll_policy_server(api: Any, namespace: str, deployment: str, model: str, version: str) -> int:
    """Point the policy vLLM Deployment at ``model`` (a checkpoint path on the shared volume, or a model id) and
    record ``version``; Kubernetes then replaces its pods. Returns the Deployment's new generation, for
    `wait_rolled`. Used when run-time LoRA loading is off: a full checkpoint needs a fresh server.

    A strategic merge patch: the ``vllm`` container's env list is merged by name, other env vars stay.
    """
    from kubernetes import client

    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    body = {
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {POLICY_VERSION_ANNOTATION: version, "conductor.io/rolled-at": stamp}
                },
                "spec": {
                    "containers": [
                        {"name": POLICY_CONTAINER, "env": [{"name": POLICY_MODEL_ENV, "value": model}]}
                    ]
                },
            }
        }
    }
    apps = client.AppsV1Api(api)
    try:
        patched = apps.patch_namespaced_deployment(deployment, namespace, body, _content_type=STRATEGIC_MERGE)
    except client.ApiException as exc:
        raise _api_error(f"rolling {namespace}/{deployment} to {version}", exc) from exc
    return int(patched.metadata.generation or 0)


def wait_rolled(
    api: Any, namespace: str, deployment: str, generation: int, timeout_s: float = 1800.0, poll_s: float = 5.0
) -> None:
    """Block until the Deployment observed ``generation`` and every replica runs it (vLLM loads take minutes)."""
    from kubernetes import client

    apps = client.AppsV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            dep = apps.read_namespaced_deployment(deployment, namespace)
        except client.ApiException as exc:
            raise _api_error(f"reading {namespace}/{deployment}", exc) from exc
        st, want = dep.status, dep.spec.replicas if dep.spec.replicas is not None else 1
        if (
            st is not None
            and (st.observed_generation or 0) >= generation
            and (st.updated_replicas or 0) >= want
            and (st.available_replicas or 0) >= want
            and (st.replicas or 0) <= want  # old pods gone
        ):
            return
        if time.monotonic() >= deadline:
            raise KubeError(
                f"{namespace}/{deployment} did not finish rolling to generation {generation} in {timeout_s}s"
            )
        time.sleep(poll_s)
