"""Generate charts/conductor/values.schema.json from values.yaml: types from the defaults, descriptions from the
``# --`` comments above each key, constraints from the table below.

Why generated: a hand-kept schema drifts from values.yaml; this keeps one source (the documented values file) and
a test fails when the committed schema is stale or a key has no description. The `nats` block is mostly the
official NATS chart's values, which that chart does not type: its top-level keys are read from the vendored archive
(charts/nats-*.tgz), so a key neither chart knows (an old `nats.replicas`) is refused, and only what Conductor relies
on is constrained below them (NATS_BY_PATH). Run from the repository root:
``.venv/bin/python infra/chart_schema.py`` (writes the file).
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "conductor"
KEY = re.compile(r"^(\s*)([A-Za-z0-9_./-]+):(.*)$")
_PULL = {"enum": ["Always", "IfNotPresent", "Never"]}
_QUANTITY = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"}
_PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
_NAT = {"type": "integer", "minimum": 0}
_PERCENT = {"type": "integer", "minimum": 1, "maximum": 100}
_LAYERS = ["netns", "pidns", "rofs", "hidden", "env", "uid", "rlimits", "seccomp"]
_PROFILE = {
    "type": "object",
    "properties": {
        "type": {"enum": ["RuntimeDefault", "Unconfined", "Localhost"], "description": "Profile kind."},
        "localhostProfile": {
            "type": "string",
            "description": "The node-installed profile, for type Localhost.",
        },
    },
    "required": ["type"],
    "additionalProperties": False,
}
# May be empty: a verifier publishes nothing but replies (allow_responses), a learner subscribes to its inbox only.
_SUBJECTS = {"type": "array", "items": {"type": "string", "pattern": r"^[^\s]+$"}}
# What a user's own account imports from the services' account (conductor/access.py, Door).
_DOORS = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "service": {"type": "string", "pattern": r"^[^\s]+$"},
            "stream": {"type": "string", "pattern": r"^[^\s]+$"},
            "window": {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
        },
        "oneOf": [{"required": ["service"]}, {"required": ["stream"]}],
        "additionalProperties": False,
    },
}
# Keys (by name, anywhere) and paths with a constraint beyond the default's type.
BY_NAME: dict[str, dict[str, Any]] = {
    "pullPolicy": _PULL,
    "replicas": {"type": "integer", "minimum": 0},
    "minReplicas": {"type": "integer", "minimum": 1},
    "maxReplicas": {"type": "integer", "minimum": 1},
    "targetCPUUtilizationPercentage": _PERCENT,
    "terminationGracePeriodSeconds": {"type": "integer", "minimum": 5},
    "maxUnavailable": {"type": "integer", "minimum": 1},
    "args": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    "publish": _SUBJECTS,
    "subscribe": _SUBJECTS,
    "doors": _DOORS,
    "user": {"type": "string", "pattern": r"^[a-z][a-z0-9-]*$"},
    "max": {"type": "integer", "minimum": 1},  # nats.responses (allow_responses)
    "expires": {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
    "size": _QUANTITY,
    "shmSize": _QUANTITY,
    "tmpSizeLimit": _QUANTITY,
    "storageClassName": {"type": "string"},
    "secretFiles": {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "secret": {"type": "string", "minLength": 1, "description": "Secret name."},
                "key": {"type": "string", "minLength": 1, "description": "Key in the Secret."},
                "env": {
                    "type": "string",
                    "pattern": "^[A-Z_][A-Z0-9_]*$",
                    "description": "Env var with the path.",
                },
            },
            "required": ["secret", "key", "env"],
            "additionalProperties": False,
        },
    },
    "role": {"enum": ["policy", "worker"]},
    "accessMode": {"enum": ["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]},
    "startupSeconds": {"type": "integer", "minimum": 10},
    "maxLoraRank": {
        "enum": [1, 8, 16, 32, 64, 128, 256, 320, 512]
    },  # vLLM's MaxLoRARanks (vllm/config/lora.py)
    "maxLoras": {"type": "integer", "minimum": 1},
    "seccompProfile": _PROFILE,
    "appArmorProfile": _PROFILE,
}
TENANT_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # schemas.solve.TENANT_PATTERN: one subject token, a NATS user name
BY_PATH: dict[str, dict[str, Any]] = {
    "metricsPort": _PORT,
    "logLevel": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
    "nats.url": {"type": "string", "pattern": r"^$|^(nats|tls)://[^\s]+$"},
    "vllm.port": _PORT,
    "image.digest": {"type": "string", "pattern": r"^$|^sha256:[0-9a-f]{64}$"},
    "verifier.sandbox.require": {"type": "array", "items": {"enum": _LAYERS}, "uniqueItems": True},
    "verifier.sandbox.procMount": {"enum": ["Default", "Unmasked"]},
    "executor.autoscaling.keda.lagThreshold": {"type": "integer", "minimum": 1},
    "executor.autoscaling.keda.activationLagThreshold": _NAT,
    "executor.autoscaling.keda.pollingInterval": {"type": "integer", "minimum": 1},
    "executor.autoscaling.keda.cooldownPeriod": _NAT,
    "networkPolicy.externalNatsPorts": {"type": "array", "items": _PORT},
    "networkPolicy.providerPorts": {"type": "array", "items": _PORT},
    "networkPolicy.kubeApiPorts": {"type": "array", "items": _PORT},
    "test.timeoutSeconds": {"type": "integer", "minimum": 10},
    "tracing.otlpEndpoint": {"type": "string", "pattern": r"^$|^https?://[^\s/]+(/.*)?$"},
    "auth.tenants": {
        "type": "array",
        "items": {"type": "string", "pattern": TENANT_PATTERN},
        "uniqueItems": True,
    },
}
# Free-form maps: Kubernetes types or user-named entries, validated by the API server or by ENTRY below.
OPEN = {
    "podSecurityContext",
    "securityContext",
    "resources",
    "nodeSelector",
    "affinity",
    "env",
    "labels",
    "annotations",
    "apiKeys.values",
    "global",
}
USER = {
    "type": "object",
    "properties": {"publish": _SUBJECTS, "subscribe": _SUBJECTS, "doors": _DOORS},
    "required": ["publish", "subscribe"],
    "additionalProperties": False,
}
# Maps whose keys the user names (a NATS user, a vLLM server): every entry follows the first default's schema.
ENTRY = {"auth.users", "vllm.servers"}
# This chart's own keys in the `nats` block; the others are the official chart's.
NATS_OWN = {"enabled", "url", "existingCredentialsSecret", "monitoringEndpoint", "account"}
# The official chart's values Conductor relies on. Everything else there is passed through untyped.
NATS_BY_PATH: dict[str, dict[str, Any]] = {
    "nats.config.jetstream.enabled": {"const": True},
    "nats.config.cluster.replicas": {"enum": [3, 5]},
    "nats.config.jetstream.fileStore.pvc.size": _QUANTITY,
    "nats.config.jetstream.memoryStore.maxSize": _QUANTITY,
}
# The merge/patch hooks, the official chart's and the components' (conductor.hooked): a map merged in, RFC 6902
# operations.
_MERGE = {"type": "object"}
_PATCH = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "op": {"enum": ["add", "remove", "replace", "copy", "move", "test"]},
            "path": {"type": "string", "pattern": "^(/.*)?$"},
            "from": {"type": "string", "pattern": "^(/.*)?$"},
        },
        "required": ["op", "path"],
    },
}


def descriptions(text: str) -> dict[str, str]:
    """``path -> description`` from the ``# --`` comment block right above each key."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and pending:
            pending.append(stripped[1:].strip())
            continue
        match = KEY.match(line)
        if not match or stripped.startswith("-"):
            pending = []
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group(2)))
        if pending:
            found[".".join(k for _, k in stack)] = " ".join(pending)
        pending = []
    return found


def official_values() -> tuple[str, dict[str, Any]]:
    """The vendored official NATS chart's archive name and default values."""
    (archive,) = sorted((CHART / "charts").glob("nats-*.tgz"))
    with tarfile.open(archive) as tar:
        member = tar.extractfile("nats/values.yaml")
        assert member is not None
        return archive.name, yaml.safe_load(member.read())


def official(value: Any, path: str, docs: dict[str, str]) -> dict[str, Any]:
    """An official-chart value Conductor sets: typed from its default, open to the official chart's other keys."""
    name = path.rsplit(".", 1)[-1]
    schema: dict[str, Any]
    if path in NATS_BY_PATH:
        schema = dict(NATS_BY_PATH[path])
    elif isinstance(value, dict) and set(value) == {"$tplYaml"}:
        schema = {}  # a template the official chart evaluates, or the value itself
    elif name == "merge":
        schema = dict(_MERGE)
    elif name == "patch":
        schema = dict(_PATCH)
    elif isinstance(value, dict) and (name in OPEN or name == "topologySpreadConstraints"):
        schema = {"type": "object"}
    elif isinstance(value, dict):
        schema = {
            "type": "object",
            "properties": {k: official(v, f"{path}.{k}", docs) for k, v in value.items()},
        }
    else:
        schema = node(value, path, docs)
    if path in docs:
        schema["description"] = docs[path]
    return schema


def nats(value: dict[str, Any], docs: dict[str, str]) -> dict[str, Any]:
    """Closed at the top, so a key neither chart reads is refused; this chart's keys typed as everywhere else."""
    archive, defaults = official_values()
    props: dict[str, Any] = {}
    for key, default in defaults.items():
        kind = {dict: "object", list: "array"}.get(type(default))
        props[key] = {
            **({"type": kind} if kind else {}),
            "description": f"The official chart's `{key}` (charts/{archive}, nats/values.yaml).",
        }
    for key, v in value.items():
        props[key] = node(v, f"nats.{key}", docs) if key in NATS_OWN else official(v, f"nats.{key}", docs)
    return {"type": "object", "properties": props, "additionalProperties": False, "description": docs["nats"]}


def node(value: Any, path: str, docs: dict[str, str]) -> dict[str, Any]:
    name = path.rsplit(".", 1)[-1]
    schema: dict[str, Any]
    if path == "nats":
        return nats(value, docs)
    if path in BY_PATH:
        schema = dict(BY_PATH[path])
    elif name == "merge" and isinstance(value, dict):
        schema = dict(_MERGE)
    elif name == "patch" and isinstance(value, list):
        schema = dict(_PATCH)
    elif name in BY_NAME and not (
        isinstance(value, dict) and name not in {"seccompProfile", "appArmorProfile"}
    ):
        schema = dict(BY_NAME[name])
    elif path in ENTRY:
        first_key, first = next(iter(value.items()))
        entry = USER if path == "auth.users" else node(first, f"{path}.{first_key}", docs)
        if path == "vllm.servers":  # a new server must say everything its Deployment needs
            entry["required"] = ["enabled", "role", "model", "replicas", "resources", "shmSize", "cache"]
            entry.pop("description", None)
        schema = {"type": "object", "additionalProperties": entry}
    elif isinstance(value, dict):
        if path in OPEN or name in OPEN:
            schema = {"type": "object"}
        else:
            props = {k: node(v, f"{path}.{k}" if path else k, docs) for k, v in value.items()}
            schema = {"type": "object", "properties": props, "additionalProperties": False}
    elif isinstance(value, bool):
        schema = {"type": "boolean"}
    elif isinstance(value, int):
        schema = {"type": "integer"}
    elif isinstance(value, float):
        schema = {"type": "number"}
    elif isinstance(value, list):
        schema = {"type": "array"}
    else:
        schema = {"type": "string"}
    if path in docs:
        schema["description"] = docs[path]
    return schema


def build() -> dict[str, Any]:
    text = (CHART / "values.yaml").read_text(encoding="utf-8")
    root = node(yaml.safe_load(text), "", descriptions(text))
    return {"$schema": "https://json-schema.org/draft-07/schema#", "title": "conductor chart values", **root}


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> int:
    (CHART / "values.schema.json").write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
