"""Generate charts/conductor/values.schema.json from values.yaml: types from the defaults, descriptions from the
``# --`` comments above each key, constraints from the table below.

Why generated: a hand-kept schema drifts from values.yaml; this keeps one source (the documented values file) and
a test fails when the committed schema is stale or a key has no description. Run from the repository root:
``.venv/bin/python infra/chart_schema.py`` (writes the file).
"""

from __future__ import annotations

import json
import re
import sys
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
        "localhostProfile": {"type": "string", "description": "The node-installed profile, for type Localhost."},
    },
    "required": ["type"],
    "additionalProperties": False,
}
# May be empty: a verifier publishes nothing but replies (allow_responses), a learner subscribes to its inbox only.
_SUBJECTS = {"type": "array", "items": {"type": "string", "pattern": r"^[^\s]+$"}}
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
    "user": {"type": "string", "pattern": r"^[a-z][a-z0-9-]*$"},
    "max": {"type": "integer", "minimum": 1},  # nats.responses (allow_responses)
    "expires": {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
    "size": _QUANTITY,
    "storageSize": _QUANTITY,
    "maxMemory": _QUANTITY,
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
                "env": {"type": "string", "pattern": "^[A-Z_][A-Z0-9_]*$", "description": "Env var with the path."},
            },
            "required": ["secret", "key", "env"],
            "additionalProperties": False,
        },
    },
    "role": {"enum": ["policy", "worker"]},
    "accessMode": {"enum": ["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]},
    "startupSeconds": {"type": "integer", "minimum": 10},
    "maxLoraRank": {"enum": [1, 8, 16, 32, 64, 128, 256, 320, 512]},  # vLLM's MaxLoRARanks (vllm/config/lora.py)
    "maxLoras": {"type": "integer", "minimum": 1},
    "seccompProfile": _PROFILE,
    "appArmorProfile": _PROFILE,
}
BY_PATH: dict[str, dict[str, Any]] = {
    "metricsPort": _PORT,
    "logLevel": {"enum": ["DEBUG", "INFO", "WARNING", "ERROR"]},
    "nats.url": {"type": "string", "pattern": r"^$|^(nats|tls)://[^\s]+$"},
    "nats.replicas": {"enum": [1, 3, 5]},
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
}
# Free-form maps: Kubernetes types or user-named entries, validated by the API server or by ENTRY below.
OPEN = {
    "podSecurityContext", "securityContext", "resources", "nodeSelector", "affinity", "env", "labels",
    "apiKeys.values", "global",
}
USER = {
    "type": "object",
    "properties": {"publish": _SUBJECTS, "subscribe": _SUBJECTS},
    "required": ["publish", "subscribe"],
    "additionalProperties": False,
}
# Maps whose keys the user names (a NATS user, a vLLM server): every entry follows the first default's schema.
ENTRY = {"auth.users", "vllm.servers"}


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


def node(value: Any, path: str, docs: dict[str, str]) -> dict[str, Any]:
    name = path.rsplit(".", 1)[-1]
    schema: dict[str, Any]
    if path in BY_PATH:
        schema = dict(BY_PATH[path])
    elif name in BY_NAME and not (isinstance(value, dict) and name not in {"seccompProfile", "appArmorProfile"}):
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
    # Helm copies `global` into each subchart's values before validating: the nats block carries it too.
    root["properties"]["nats"]["properties"]["global"] = {
        "type": "object",
        "description": "Set by Helm: the top-level global block, as the bundled NATS chart sees it.",
    }
    return {"$schema": "https://json-schema.org/draft-07/schema#", "title": "conductor chart values", **root}


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> int:
    (CHART / "values.schema.json").write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
