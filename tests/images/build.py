"""Images built for real with podman (the `images` tier, `make test-images`): a Debian bookworm base from
debootstrap imported into podman (no image registry is reachable here), then infra/Dockerfile and
infra/Dockerfile.learner built on it with the runc runtime, the machine's pip configuration passed in as a build
secret and the host paths it names mounted read-only for the build's RUN steps only (never copied into a layer, and
no index host written into a file of the project).

``python -m tests.images.build`` builds the base and both images and prints their sizes and build times.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = "localhost/conductor-python:bookworm"
CORE = "localhost/conductor:test"
LEARNER = "localhost/conductor-learner:test-cpu"
# What the base needs beyond minbase: the interpreter infra/Dockerfile calls `python`, venv, and CA certificates.
BASE_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
MIRROR = "http://deb.debian.org/debian"


class PodmanError(RuntimeError):
    """A podman, debootstrap or pip command failed; the message carries its output's tail."""


def engine_env(work: Path) -> dict[str, str]:
    """podman's environment: a containers.conf of our own with ``default_ulimits = []`` (this machine may not raise
    RLIMIT_NOFILE/NPROC, which podman's defaults ask for), the machine's own left untouched."""
    conf = work / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n", encoding="utf-8")
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def run(cmd: list[str], env: dict[str, str], *, timeout: float = 3600, nice: bool = True) -> str:
    full = ["nice", "-n", "19", *cmd] if nice else cmd
    done = subprocess.run(full, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise PodmanError(f"{shlex.join(cmd)} exited {done.returncode}:\n{tail}")
    return done.stdout


def image_exists(name: str, env: dict[str, str]) -> bool:
    return subprocess.run(["podman", "image", "exists", name], env=env, check=False).returncode == 0


def base_image(work: Path, env: dict[str, str]) -> None:
    """The Python base from ``debootstrap --variant=minbase bookworm``, package caches and docs dropped."""
    if image_exists(BASE, env):
        return
    rootfs = work / "rootfs"
    run(
        ["debootstrap", "--variant=minbase", f"--include={BASE_PACKAGES}", "bookworm", str(rootfs), MIRROR],
        env,
    )
    run(
        [
            "sh",
            "-c",
            f"rm -rf {rootfs}/var/cache/apt/archives/*.deb {rootfs}/var/lib/apt/lists/* "
            f"{rootfs}/usr/share/doc/* {rootfs}/usr/share/man/* {rootfs}/usr/share/locale/*",
        ],
        env,
    )
    run(["sh", "-c", f"tar -C {rootfs} -c . | podman import --change 'CMD [\"python3\"]' - {BASE}"], env)
    run(["rm", "-rf", str(rootfs)], env)


def pip_settings(env: dict[str, str]) -> dict[str, str]:
    """This machine's pip configuration (files and PIP_* variables, the latter winning), as ``pip config list``
    resolves it."""
    out = run([sys.executable, "-m", "pip", "config", "list"], env, nice=False)
    settings: dict[str, str] = {}
    for line in sorted(out.splitlines(), key=lambda s: s.startswith(":env:")):
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[1]] = value.strip().strip("'\"")
    return settings


def pip_build_flags(work: Path, env: dict[str, str]) -> list[str]:
    """``--secret`` with the merged pip.conf, and ``--volume`` (read-only, RUN steps only) for every host path it
    names (a certificate, a constraints file, a find-links folder), so that pip in the build sees what pip here sees."""
    settings = pip_settings(env)
    conf = work / "pip.conf"
    conf.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()), encoding="utf-8")
    flags = ["--secret", f"id=pipconf,src={conf}"]
    words = [word for v in settings.values() for word in v.split()]
    # A file:// index (.../simple) links to its files beside it, so its parent folder goes in.
    paths = {Path(w.removeprefix("file://")).parent if w.startswith("file://") else Path(w) for w in words}
    for path in sorted(p for p in paths if p.is_absolute() and p.exists()):
        flags += ["--volume", f"{path}:{path}:ro"]
    return flags


@dataclass(frozen=True)
class Built:
    image: str
    build_s: float
    size_mb: float


def build(dockerfile: str, tag: str, work: Path, env: dict[str, str], *, target: str | None = None) -> Built:
    started = time.monotonic()
    cmd = [
        "podman",
        "build",
        "--runtime",
        "runc",
        "--network",
        "host",
        "--layers",
        "-f",
        dockerfile,
        "-t",
        tag,
    ]
    cmd += ["--build-arg", f"PYTHON_IMAGE={BASE}", *pip_build_flags(work, env)]
    cmd += ["--target", target] if target else []
    run([*cmd, str(ROOT)], env)
    seconds = time.monotonic() - started
    inspect = json.loads(run(["podman", "image", "inspect", tag], env, nice=False))
    return Built(tag, round(seconds, 1), round(inspect[0]["Size"] / 1e6, 1))


def build_all(work: Path) -> list[Built]:
    env = engine_env(work)
    base_image(work, env)
    return [build("infra/Dockerfile", CORE, work, env), build("infra/Dockerfile.learner", LEARNER, work, env)]


if __name__ == "__main__":
    out = Path(os.environ.get("CONDUCTOR_IMAGES_WORK", "/tmp/conductor-images"))
    out.mkdir(parents=True, exist_ok=True)
    for built in build_all(out):
        print(json.dumps(asdict(built)))
