"""Render the chart with the real Helm SDK (helm-python-sdk: Helm's Go library through ctypes, no helm binary)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import yaml
from helm_python.chart import Chart

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "charts" / "conductor"
RELEASE, NAMESPACE = "rel", "ai"
KUBE_VERSION = (
    "1.33.0"  # the oldest Kubernetes the chart targets that has hostUsers/procMount for the verifier
)
CASES = [
    "default",
    *sorted(p.name.removesuffix("-values.yaml") for p in (CHART_DIR / "ci").glob("*-values.yaml")),
]


def case_values(case: str) -> dict[str, Any]:
    if case == "default":
        return {}
    return yaml.safe_load((CHART_DIR / "ci" / f"{case}-values.yaml").read_text(encoding="utf-8")) or {}


def chart() -> Chart:
    """A freshly loaded chart: Helm prunes disabled subcharts from the loaded chart while rendering, so a loaded
    chart is never reused across renders with different values."""
    return Chart.load(CHART_DIR)


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rendered object (NOTES.txt and empty documents dropped), in template order."""
    with chart() as loaded:
        files = loaded.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


@functools.cache
def _rendered_case(case: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(case_values(case)))


def rendered(case: str) -> list[dict[str, Any]]:
    return list(_rendered_case(case))


def objects(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every workload and test pod."""
    out = []
    for d in docs:
        if d["kind"] in {"Deployment", "StatefulSet"}:
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d["kind"] == "Pod":
            out.append((d["metadata"]["name"], d["spec"]))
    return out


_USER = re.compile(
    r'user: "(?P<user>[^"]+)"\s*password: \$(?P<password>\w+)\s*permissions: \{\s*'
    r"publish: \{ allow: (?P<publish>\[.*?\]) \}\s*subscribe: \{ allow: (?P<subscribe>\[.*?\]) \}"
    r'(?:\s*allow_responses: \{ max: (?P<max>\d+), expires: "(?P<expires>[^"]+)" \})?',
    re.S,
)


def nats_users(conf: str) -> dict[str, dict[str, Any]]:
    """The users of a rendered authorization block: the password variable, the publish and subscribe lists, and
    allow_responses (or None)."""
    users = {}
    for m in _USER.finditer(conf):
        responses = {"max": int(m["max"]), "expires": m["expires"]} if m["max"] else None
        users[m["user"]] = {
            "password": m["password"],
            "publish": json.loads(m["publish"]),
            "subscribe": json.loads(m["subscribe"]),
            "responses": responses,
        }
    return users
