"""The Tiltfile, evaluated with a real Starlark interpreter (starlark-pyo3) against recording stubs of Tilt's
builtins. `helm()` is stubbed by the real Helm SDK, so every resource the Tiltfile names must exist in the chart it
renders, and every image it builds must be one the chart uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python
import pytest
import starlark as sl
import yaml

from tests.deploy.chart import ROOT, chart

TILTFILE = ROOT / "Tiltfile"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


class Tilt:
    """Records what the Tiltfile declares; `helm` renders for real."""

    def __init__(self, args: dict[str, Any]) -> None:
        self.args = args
        self.flags: dict[str, str] = {}
        self.builds: list[dict[str, Any]] = []
        self.resources: dict[str, dict[str, Any]] = {}
        self.local: dict[str, dict[str, Any]] = {}
        self.yaml: list[dict[str, Any]] = []
        self.watched: list[str] = []

    # config.*
    def define(self, kind: str):
        def define(name: str, args: bool = False, usage: str = "") -> None:
            assert usage, f"flag {name} has no usage text"
            self.flags[name] = kind

        return define

    def parse(self) -> dict[str, Any]:
        unknown = set(self.args) - set(self.flags)
        assert not unknown, f"flags not defined: {unknown}"
        return dict(self.args)

    # image builds and live update
    def sync(self, local: str, remote: str) -> dict[str, str]:
        assert (ROOT / local).exists(), local
        return {"sync": local, "to": remote}

    def fall_back_on(self, files: list[str]) -> dict[str, Any]:
        assert all((ROOT / f).exists() for f in files), files
        return {"fall_back_on": files}

    def docker_build(
        self, ref: str, context: str, dockerfile: str, target: str = "", only: Any = (), live_update: Any = ()
    ) -> None:
        text = (ROOT / dockerfile).read_text()
        assert not target or f" AS {target}" in text, f"{dockerfile} has no stage {target}"
        assert all((ROOT / context / p).exists() for p in only), only
        self.builds.append(
            {"ref": ref, "dockerfile": dockerfile, "target": target, "live_update": list(live_update)}
        )

    # manifests
    def helm(self, path: str, name: str, namespace: str, values: Any = (), set: Any = ()) -> str:
        merged: dict[str, Any] = {}
        for f in values:
            merged = _merge(merged, yaml.safe_load((ROOT / f).read_text()))
        for expr in set:
            merged = _merge(merged, helm_python.parse_set_string(expr))
        assert Path(ROOT / path).resolve() == chart_dir()
        with chart() as loaded:
            loaded.validate_schema(merged)
            files = loaded.render(merged, name=name, namespace=namespace, is_install=True)
        return "\n---\n".join(t for p, t in sorted(files.items()) if not p.endswith("NOTES.txt"))

    def k8s_yaml(self, blob: str) -> None:
        self.yaml += [d for d in yaml.safe_load_all(blob) if d]

    def k8s_resource(
        self, workload: str, labels: Any = (), resource_deps: Any = (), port_forwards: Any = ()
    ) -> None:
        self.resources[workload] = {"deps": list(resource_deps), "ports": list(port_forwards)}

    def local_resource(
        self,
        name: str,
        cmd: str,
        auto_init: bool = True,
        trigger_mode: Any = None,
        resource_deps: Any = (),
        labels: Any = (),
    ) -> None:
        self.local[name] = {"cmd": cmd, "deps": list(resource_deps)}

    def globals(self) -> sl.Module:
        module = sl.Module()
        for name in [
            "sync",
            "fall_back_on",
            "docker_build",
            "helm",
            "k8s_yaml",
            "k8s_resource",
            "local_resource",
        ]:
            module.add_callable(name, getattr(self, name))
        module.add_callable("_define_bool", self.define("bool"))
        module.add_callable("_define_string", self.define("string"))
        module.add_callable("_parse", self.parse)
        module.add_callable("watch_file", self.watched.append)
        module.add_callable("read_file", lambda path: (ROOT / path).read_text())
        module.add_callable("blob", lambda text: text)
        module.add_callable("encode_yaml", lambda obj: yaml.safe_dump(obj))
        module["TRIGGER_MODE_MANUAL"] = 1
        return module


def chart_dir() -> Path:
    return (ROOT / "charts" / "conductor").resolve()


PRELUDE = "config = struct(define_bool=_define_bool, define_string=_define_string, parse=_parse)\n"


def evaluate(args: dict[str, Any]) -> Tilt:
    tilt = Tilt(args)
    module = tilt.globals()
    dialect = sl.Dialect.extended()
    source = PRELUDE + TILTFILE.read_text()
    ast = sl.parse("Tiltfile", source, dialect)
    sl.eval(module, ast, sl.Globals.extended_by([sl.LibraryExtension.StructType, sl.LibraryExtension.Print]))
    return tilt


def workloads(tilt: Tilt) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in tilt.yaml if d["kind"] in {"Deployment", "StatefulSet"}}


def images(tilt: Tilt) -> set[str]:
    return {
        c["image"].split(":")[0]
        for d in workloads(tilt).values()
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def test_default_runs_nats_and_every_service_with_live_update():
    tilt = evaluate({})
    assert set(tilt.resources) == {
        "conductor-nats",
        "conductor-planner",
        "conductor-executor",
        "conductor-worker-adapter",
        "conductor-verifier",
        "conductor-gateway",
    }
    assert set(tilt.resources) <= set(workloads(tilt)), "every Tilt resource is a workload the chart renders"
    (build,) = tilt.builds
    assert build["ref"] == "conductor" and build["target"] == "dev"
    synced = {step["sync"] for step in build["live_update"] if "sync" in step}
    assert synced == {"conductor", "tasks", "services", "schemas"}
    assert {b["ref"] for b in tilt.builds} <= images(tilt)
    ports = [p for r in tilt.resources.values() for spec in r["ports"] for p in [spec.split(":")[0]]]
    assert len(ports) == len(set(ports)), "local port-forwards collide"
    assert tilt.resources["conductor-nats"]["ports"] == ["4222:4222", "8222:8222"]
    for name in ["planner", "executor", "worker-adapter", "verifier"]:
        assert tilt.resources[f"conductor-{name}"]["deps"] == ["conductor-nats"]


def test_the_gateway_is_forwarded_and_open_locally_without_keys():
    tilt = evaluate({})
    assert "8080:8080" in tilt.resources["conductor-gateway"]["ports"]
    (container,) = workloads(tilt)["conductor-gateway"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["CONDUCTOR_GATEWAY_ALLOW_ANONYMOUS"] == "true" and env["CONDUCTOR_GATEWAY_PORT"] == "8080"


def test_default_uses_the_simulated_pool_and_no_learner():
    tilt = evaluate({})
    assert "conductor-learner" not in workloads(tilt)
    assert not [d for d in tilt.yaml if d["kind"] == "ConfigMap" and "pool" in d["metadata"]["name"]]
    env = workloads(tilt)["conductor-worker-adapter"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "CONDUCTOR_POOL" not in {e["name"] for e in env}  # no pool file: the bundled simulated pool


def test_learner_is_an_optional_resource():
    tilt = evaluate({"learner": True})
    assert "conductor-learner" in workloads(tilt) and "conductor-learner" in tilt.resources
    assert {b["ref"] for b in tilt.builds} == {"conductor", "conductor-learner"} <= images(tilt)


def test_pool_file_becomes_a_configmap(tmp_path):
    pool = ROOT / "conductor" / "data" / "demo_pool.toml"
    tilt = evaluate({"pool": str(pool.relative_to(ROOT))})
    (cm,) = [
        d for d in tilt.yaml if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "conductor-dev-pool"
    ]
    assert cm["data"]["pool.toml"] == pool.read_text()
    env = workloads(tilt)["conductor-worker-adapter"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "CONDUCTOR_POOL", "value": "/etc/conductor/pool/pool.toml"} in env


def test_the_solve_button_waits_for_every_service():
    tilt = evaluate({})
    assert set(tilt.local["solve"]["deps"]) == {
        f"conductor-{n}" for n in ["executor", "planner", "worker-adapter", "verifier"]
    }
    assert "conductor solve" in tilt.local["solve"]["cmd"]


def test_an_unknown_flag_is_refused():
    with pytest.raises(sl.StarlarkError):
        evaluate({"gpu": True})
