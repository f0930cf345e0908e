"""What the Dockerfiles promise, read from the files (no Docker engine here): pinned bases, non-root users, the
dependency lock covering the project's requirements, a build context that holds only what the images copy."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement

from tests.deploy.chart import ROOT

CPU = (ROOT / "infra" / "Dockerfile").read_text()
LEARNER = (ROOT / "infra" / "Dockerfile.learner").read_text()


def _stages(text: str) -> list[str]:
    return re.findall(r"^FROM\s+(\S+)", text, re.M)


def test_base_images_are_pinned_to_a_patch_version():
    for text in (CPU, LEARNER):
        for image in re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.M):
            assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", image), image


def test_images_run_as_a_non_root_user():
    for text in (CPU, LEARNER):
        users = re.findall(r"^USER\s+(\S+)", text, re.M)
        assert users and users[-1] == "10001:10001"


def test_default_target_is_the_runtime_not_the_dev_stage():
    assert _stages(CPU)[-1] == "runtime"
    assert "reload.py" not in CPU.split("FROM runtime AS dev")[0]


def test_lock_pins_every_core_and_image_extra_requirement():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(
        line.split("==")
        for line in (ROOT / "infra" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    wanted = [
        *project["dependencies"],
        *project["optional-dependencies"]["otel"],
        *project["optional-dependencies"]["kube"],
    ]
    for spec in wanted:
        req = Requirement(spec)
        if req.marker and not req.marker.evaluate():
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{name} missing from infra/constraints.txt (run infra/lock.py)"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name], str(req.specifier))
    assert "torch" not in pins and "pytest" not in pins  # the CPU image carries no learner or test tooling


def test_the_verifier_image_carries_bigcodebench_libraries_pinned():
    """Issue 20: code verdicts run with the task's libraries importable, so the verifier's image installs the
    `bigcodebench` extra, every requirement pinned (infra/lock.py --extra bigcodebench)."""
    assert "FROM runtime AS verifier" in CPU and "constraints-bigcodebench.txt" in CPU
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = dict(
        line.split("==")
        for line in (ROOT / "infra" / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    extra = dict(
        line.split("==")
        for line in (ROOT / "infra" / "constraints-bigcodebench.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    for spec in project["optional-dependencies"]["bigcodebench"]:
        name = re.sub(r"[-_.]+", "-", Requirement(spec).name).lower()
        assert name in extra or name in core, f"{name} missing from infra/constraints-bigcodebench.txt"


def test_build_context_is_only_what_the_images_copy():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert next(line for line in ignore if not line.startswith("#")) == "*"
    copied = set()
    for text in (CPU, LEARNER):
        for src in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
            copied |= set(src.split())
    assert copied <= allowed, copied - allowed
    assert all((ROOT / path).exists() for path in allowed)


def test_every_package_of_the_project_is_copied_into_each_image():
    """`pip install --editable /app` finds only the packages copied there: one left out (evaluation/, imported by
    the CLI's parser) makes every `conductor` command in the image fail at import (found building it, issue 36)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for text in (CPU, LEARNER):
        for package in packages:
            assert f"COPY {package} /app/{package}" in text, package
    assert all(f"!{package}/" in ignore for package in packages)
