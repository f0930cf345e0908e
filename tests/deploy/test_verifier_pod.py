"""The sandbox layers the chart requires of the verifier pod are the ones a non-root verifier really gets: run
`conductor verify --layers` as uid 10001 inside a user namespace (what a `hostUsers: false` pod is) and compare
with `verifier.sandbox.require`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.chart import named, rendered

CONDUCTOR = Path(sys.executable).with_name("conductor")


def _layers_as_uid_10001() -> tuple[str, set[str], set[str]]:
    tool = shutil.which("unshare")
    if tool is None:
        pytest.skip("util-linux unshare is not installed")
    run = subprocess.run(
        [tool, "--user", "--map-user=10001", "--map-group=10001", str(CONDUCTOR), "verify", "--layers"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The layers line; the benchmark libraries line follows it.
    line = next((ln for ln in run.stdout.splitlines() if ln.startswith("backend=")), "")
    if run.returncode not in (0, 1) or not line.startswith("backend="):
        pytest.skip(f"no unprivileged user namespaces here: {run.stderr.strip()[-300:]}")
    parts = dict(part.strip().replace("=", ":", 1).split(":", 1) for part in line.split(";"))

    def names(key: str) -> set[str]:
        return {x.strip() for x in parts.get(key, "").split(",") if x.strip() and x.strip() != "none"}

    return parts["backend"].strip(), names("active"), names("missing")


def test_required_layers_are_what_a_non_root_verifier_gets():
    backend, active, missing = _layers_as_uid_10001()
    assert backend == "bwrap"
    env = named(rendered("default"), "Deployment", "rel-conductor-verifier")["spec"]["template"]["spec"]
    required = next(
        e["value"] for e in env["containers"][0]["env"] if e["name"] == "CONDUCTOR_SANDBOX_REQUIRE"
    )
    assert set(required.split(",")) == active
    assert missing == {"uid"}  # candidates under other uids need a root supervisor
