"""NATS from the official chart (nats-io/k8s `nats` 2.14.2): the dependency is the vendored, reviewed archive and
its lock is the one Helm writes; the per-service users from conductor/access.py go in through its config merge; its
hooks, exporter and TLS are reachable through this chart's values, and values that would drop the users refuse to
render. Everything renders offline from charts/nats-2.14.2.tgz (no chart repository is contacted)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import posixpath
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python import registry
from helm_python.chart import dependency_list
from helm_python.errors import HelmRenderError

from conductor.access import chart_values
from tests.deploy.chart import CHART_DIR, chart, named, nats_users, objects, render, rendered

REPOSITORY = "https://nats-io.github.io/k8s/helm/charts/"
ARCHIVE = CHART_DIR / "charts" / "nats-2.14.2.tgz"
# The archive reviewed when it was vendored: identical, file by file, to nats-io/k8s helm/charts/nats at commit
# 957650f ("Update NATS chart to 2.14.2"). A new version is a new review: update the pin with the archive.
ARCHIVE_SHA256 = "3018da951fb1a8f95aabae35661e6c2f01810ce158f672cde13ebdabdadf0c6f"
EVERY_USER = {"gateway": {"enabled": True}, "learner": {"enabled": True}}


def _server(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return named(docs, "StatefulSet", "rel-nats")["spec"]["template"]["spec"]


def _container(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (c,) = [c for c in _server(docs)["containers"] if c["name"] == name]
    return c


# --- the dependency -----------------------------------------------------------------------------------------


def test_nats_is_the_official_chart_pinned_and_vendored():
    meta = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert meta["dependencies"] == [
        {"name": "nats", "version": "2.14.2", "repository": REPOSITORY, "condition": "nats.enabled"}
    ]
    assert hashlib.sha256(ARCHIVE.read_bytes()).hexdigest() == ARCHIVE_SHA256
    assert [(d["name"], d["status"]) for d in dependency_list(CHART_DIR)] == [("nats", "ok")]
    with chart() as loaded:
        assert [(d["name"], d["version"]) for d in loaded.dependencies] == [("nats", "2.14.2")]
    assert not (CHART_DIR / "charts" / "nats").exists(), "the homemade subchart is gone"


def _hash_req(req: list[dict[str, Any]], lock: list[dict[str, Any]]) -> str:
    """Helm's resolver.HashReq: sha256 of the JSON of [Chart.yaml's dependencies, Chart.lock's], fields in the
    order of Helm's Dependency struct, empty ones left out (checked against Helm below)."""

    def dep(d: dict[str, Any]) -> dict[str, Any]:
        out = {
            "name": d["name"],
            "version": d.get("version"),
            "repository": d["repository"],
            "condition": d.get("condition"),
        }
        return {k: v for k, v in out.items() if v or k == "repository"}

    data = json.dumps([[dep(d) for d in req], [dep(d) for d in lock]], separators=(",", ":"))
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


@contextlib.contextmanager
def _local_repository(root: Path):
    """A chart repository on 127.0.0.1 holding the vendored archive: `helm dependency update` without a network."""
    shutil.copy(ARCHIVE, root / ARCHIVE.name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        registry.repo_index_generate(root, base_url=url.rstrip("/"))
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield url
        finally:
            httpd.shutdown()


def test_chart_lock_is_what_helm_dependency_update_writes(tmp_path):
    """Helm's own `dependency update` against a local repository holding the same archive writes the lock our
    _hash_req reproduces; the committed Chart.lock, for the real repository, passes the same check, so a user with
    a network gets `helm dependency build` to fetch exactly 2.14.2 instead of an "out of sync" error."""
    repo, copy = tmp_path / "repo", tmp_path / "conductor"
    repo.mkdir()
    shutil.copytree(CHART_DIR, copy, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    with _local_repository(repo) as url:
        meta = (copy / "Chart.yaml").read_text().replace(REPOSITORY, url)
        (copy / "Chart.yaml").write_text(meta)
        registry.dependency_update(copy)
    assert (copy / "charts" / ARCHIVE.name).read_bytes() == ARCHIVE.read_bytes()
    helm_lock = yaml.safe_load((copy / "Chart.lock").read_text())
    assert helm_lock["digest"] == _hash_req(yaml.safe_load(meta)["dependencies"], helm_lock["dependencies"])

    lock = yaml.safe_load((CHART_DIR / "Chart.lock").read_text())
    deps = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["dependencies"]
    assert lock["dependencies"] == [{"name": "nats", "repository": REPOSITORY, "version": "2.14.2"}]
    assert lock["digest"] == _hash_req(deps, lock["dependencies"])


# --- the users, through the official chart's config merge -----------------------------------------------------


def test_the_users_of_conductor_access_reach_nats_conf_through_the_config_merge():
    """nats.conf (the official chart's) includes the authorization block this chart renders from the service
    blocks, which hold what conductor/access.py declares; the include resolves to the mounted ConfigMap, and the
    server has the passwords the block names. tests/deploy/test_nats_users.py runs that config on nats-server."""
    docs = render(EVERY_USER)
    conf = named(docs, "ConfigMap", "rel-nats-config")["data"]["nats.conf"]
    (include,) = [line.strip() for line in conf.splitlines() if line.strip().startswith("include ")]
    path = posixpath.normpath(
        posixpath.join("/etc/nats-config", include.removeprefix("include ").rstrip(";"))
    )
    nats = _container(docs, "nats")
    (mount,) = [m for m in nats["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in _server(docs)["volumes"] if v["name"] == mount["name"]]
    auth = named(docs, "ConfigMap", volume["configMap"]["name"])["data"][posixpath.basename(path)]

    users = nats_users(auth)
    blocks = {
        b: e for b, e in chart_values().items() if b != "auth.tenant"
    }  # a tenant's: per name, none listed
    for block, entry in blocks.items():
        user = block.removeprefix("auth.users.") if block.startswith("auth.users.") else entry["user"]
        got = users[user]
        assert got["publish"] == entry["publish"], user
        assert got["subscribe"] == [*entry["subscribe"], f"_INBOX.{user}.>"], user
        assert got["responses"] == entry.get("responses"), user
    assert set(users) == {
        b.removeprefix("auth.users.") if b.startswith("auth.users.") else e["user"] for b, e in blocks.items()
    }

    secret = {e["secretRef"]["name"] for e in nats["envFrom"]}
    assert secret == {"rel-nats-credentials"}
    assert {u["password"] for u in users.values()} == set(
        named(docs, "Secret", "rel-nats-credentials")["data"]
    )
    # The config reloader watches the block too: a changed permission applies without a restart.
    assert path in _container(docs, "reloader")["args"]


def test_jetstream_on_file_storage_and_the_monitoring_port_for_keda():
    docs = rendered("default")
    conf = named(docs, "ConfigMap", "rel-nats-config")["data"]["nats.conf"]
    assert (
        '"store_dir": "/data"' in conf and '"max_file_store": 10Gi' in conf and '"max_payload": 8MB' in conf
    )
    sts = named(docs, "StatefulSet", "rel-nats")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert {"name": claim["metadata"]["name"], "mountPath": "/data"} in _container(docs, "nats")[
        "volumeMounts"
    ]
    ports = {p["name"]: p["port"] for p in named(docs, "Service", "rel-nats")["spec"]["ports"]}
    assert ports == {"nats": 4222, "monitor": 8222}
    assert not [d for d in docs if "nats-box" in d["metadata"]["name"]]


def test_the_official_chart_hooks_and_exporter_are_values_away():
    docs = rendered("vllm-workers")
    assert _container(docs, "prom-exporter")["ports"] == [{"name": "prom-metrics", "containerPort": 7777}]
    (monitor,) = objects(docs, "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"  # set through its merge hook
    ingress = named(docs, "NetworkPolicy", "rel-conductor-nats")["spec"]["ingress"]
    assert any(r["ports"] == [{"port": 7777, "protocol": "TCP"}] for r in ingress)
    # An operator's own container patch, after the chart's two entries, reaches the server.
    keep = yaml.safe_load((CHART_DIR / "values.yaml").read_text())["nats"]["container"]["patch"]
    mine = {"op": "add", "path": "/env/-", "value": {"name": "GODEBUG", "value": "madvdontneed=1"}}
    docs = render(
        {
            "nats": {
                "container": {"patch": [*keep, mine]},
                "podTemplate": {"merge": {"metadata": {"annotations": {"team": "bus"}}}},
            }
        }
    )
    assert mine["value"] in _container(docs, "nats")["env"]
    assert named(docs, "StatefulSet", "rel-nats")["spec"]["template"]["metadata"]["annotations"] == {
        "team": "bus"
    }


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"nats": {"container": {"patch": []}}}, r"nats\.container\.patch must keep"),
        ({"nats": {"statefulSet": {"patch": []}}}, r"nats\.statefulSet\.patch must keep"),
        ({"nats": {"config": {"merge": {"$include": None}}}}, r"nats\.config\.merge must keep"),
        ({"global": {"tls": {"enabled": True, "secretName": "t"}}}, r"must agree"),
        (
            {
                "nats": {"config": {"nats": {"tls": {"enabled": True}}}},
                "global": {"tls": {"enabled": True, "secretName": "t"}},
            },
            r"nats\.config\.nats\.tls\.secretName is required",
        ),
    ],
)
def test_values_that_would_drop_the_users_or_split_tls_refuse_to_render(values, message):
    with pytest.raises(HelmRenderError, match=message):
        render(values)
