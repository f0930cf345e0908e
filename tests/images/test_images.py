"""The `images` tier (`make test-images`): the core and learner images built with podman from a bootstrapped Debian
base, the chart's services run from the core image as containers the way the chart runs them, tasks solved through
them with a plain client, the executor killed mid-run and every durable task still finished. Sizes, build times and
what ran land in tests/artifacts/images.json."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from conductor.client import ConductorClient, ResultNotReadyError
from conductor.settings import CommonSettings
from schemas.solve import SolveRequest
from tests.deploy.chart import objects
from tests.images import containers
from tests.images.build import CORE, LEARNER, build_all, engine_env, run

pytestmark = [
    pytest.mark.images,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(
        not all(shutil.which(t) for t in ("podman", "runc", "debootstrap")),
        reason="needs podman, runc and debootstrap (`make test-images` installs them)",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "tests" / "artifacts" / "images.json"
SERVICES = ("worker-adapter", "planner", "verifier", "executor")
QUESTIONS = [json.loads(line) for line in (ROOT / "conductor" / "data" / "demo_questions.jsonl").open()][:12]


class Stack:
    """NATS and the chart's four core services as containers on their own podman network."""

    def __init__(self, work: Path) -> None:
        self.work, self.env = work, engine_env(work)
        self.docs = containers.chart_docs({"pool": {"toml": containers.slow_demo_pool(2.0)}})
        self.pw = containers.passwords(self.docs)
        self.prefix = f"ct{uuid.uuid4().hex[:6]}"
        self.names: list[str] = []

    def podman(self, *args: str, timeout: float = 300) -> str:
        return run(["podman", *args], self.env, timeout=timeout, nice=False)

    def start(self) -> None:
        subprocess.run(["podman", "network", "create", containers.NETWORK], env=self.env, capture_output=True)
        containers.nats_image(self.work, self.env)
        self._run("nats", containers.nats_flags(self.docs, self.work, self.pw))
        self.nats_ip = containers.address(f"{self.prefix}-nats", self.env)
        for service in SERVICES:
            deployment = next(
                d for d in objects(self.docs, "Deployment") if d["metadata"]["name"].endswith(service)
            )
            self._run(
                service,
                containers.service_flags(deployment, CORE, self.pw, self.nats_ip, self.docs, self.work),
            )
        for service in SERVICES:
            self.wait_ready(service)

    def _run(self, name: str, flags: list[str]) -> None:
        full = f"{self.prefix}-{name}"
        self.podman("run", "-d", "--runtime", "runc", "--name", full, "--network", containers.NETWORK, *flags)
        self.names.append(full)

    def wait_ready(self, service: str, timeout: float = 180) -> None:
        """Until the container's /readyz answers 200 (what the chart's readiness probe asks)."""
        name = f"{self.prefix}-{service}"
        probe = "import urllib.request as u; u.urlopen('http://127.0.0.1:9464/readyz', timeout=2)"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["podman", "exec", name, "python", "-c", probe],
                env=self.env,
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                return
            time.sleep(1)
        raise AssertionError(
            f"{service} not ready in {timeout:g}s:\n{self.podman('logs', '--tail', '30', name)}"
        )

    def url(self, user: str) -> str:
        return f"nats://{user}:{self.pw[f'NATS_PASSWORD_{user.upper()}']}@{self.nats_ip}:4222"

    def stop(self) -> None:
        for name in reversed(self.names):
            subprocess.run(
                ["podman", "rm", "-f", "-t", "5", name], env=self.env, capture_output=True, check=False
            )


@pytest.fixture(scope="module")
def report() -> Iterator[dict[str, Any]]:
    data: dict[str, Any] = {}
    yield data
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, report: dict[str, Any]) -> Path:
    work = tmp_path_factory.mktemp("images")
    report["images"] = [asdict(b) for b in build_all(work)]
    return work


@pytest.fixture(scope="module")
def stack(built: Path) -> Iterator[Stack]:
    s = Stack(built)
    try:
        s.start()
        yield s
    finally:
        s.stop()


# Printed by each image: any compiler or build tool on PATH, any pip or build cache left behind, then its user id.
LEAN_CHECK = (
    "for t in gcc cc c++ make; do command -v $t; done; "
    "for d in /root/.cache /tmp/.cache /opt/venv/.cache; do test -e $d && echo $d; done; id -u"
)


def _in(image: str, env: dict[str, str], entrypoint: str, *args: str) -> str:
    return run(
        ["podman", "run", "--rm", "--runtime", "runc", "--entrypoint", entrypoint, image, *args],
        env,
        nice=False,
    )


def test_images_are_lean(built: Path, report: dict[str, Any]):
    env = engine_env(built)
    for image in (CORE, LEARNER):
        lines = _in(image, env, "sh", "-c", LEAN_CHECK).split()
        assert lines == ["10001"], (image, lines)
    torch = _in(
        LEARNER, env, "python", "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"
    )
    report["learner_torch"] = torch.strip()
    assert torch.startswith("2.13.0+cpu")


def test_solves_through_the_containers(stack: Stack, report: dict[str, Any]):
    async def solve() -> list[Any]:
        async with ConductorClient(CommonSettings(nats_url=stack.url("client"))) as client:
            reqs = [
                SolveRequest(question=q["question"], reference=q["answer"], domain=q["domain"])
                for q in QUESTIONS[:3]
            ]
            return list(await asyncio.gather(*(client.solve(r, timeout=180) for r in reqs)))

    results = asyncio.run(solve())
    report["solved"] = [
        {"answer": r.answer, "error": r.error and r.error.code, "reward": r.reward} for r in results
    ]
    assert all(r.error is None and r.answer for r in results), report["solved"]
    layers = stack.podman("exec", f"{stack.prefix}-verifier", "conductor", "verify", "--layers")
    report["verifier_layers"] = layers.strip().splitlines()


def test_executor_killed_mid_run_and_every_task_finishes(stack: Stack, report: dict[str, Any]):
    executor = f"{stack.prefix}-executor"

    async def scenario() -> dict[str, Any]:
        async with ConductorClient(CommonSettings(nats_url=stack.url("client"))) as client:
            ids = [
                await client.submit(
                    SolveRequest(question=q["question"], reference=q["answer"], policy="refine:3")
                )
                for q in QUESTIONS
            ]
            await asyncio.sleep(2)  # every task is under way: each lasts at least 3 worker calls of 2 s
            stack.podman("kill", "--signal", "KILL", executor)
            unfinished = [i for i in ids if await _pending(client, i)]
            stack.podman("start", executor)  # what the kubelet does after a crash
            results = [await client.result(i, wait=300) for i in ids]
            return {
                "tasks": len(ids),
                "unfinished_at_kill": len(unfinished),
                "errors": [str(r.error.code) for r in results if r.error is not None],
            }

    outcome = asyncio.run(scenario())
    report["executor_kill"] = outcome
    assert outcome["unfinished_at_kill"] > 0, "every task had finished before the kill: nothing was tested"
    assert outcome["errors"] == []


async def _pending(client: ConductorClient, task_id: str) -> bool:
    try:
        await client.result(task_id, wait=0)
    except ResultNotReadyError:
        return True
    return False
