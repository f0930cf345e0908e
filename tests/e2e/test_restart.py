"""Operations on real NATS: services ride out a nats-server restart, and `serve all` drains on SIGTERM.

- Restart: all services in this process against a nats-server on a fixed port with a persistent store; solve
  (request/reply and durable) before and after replacing the server. Core subscriptions are resent by nats-py on
  reconnect; the durable pull consumer lives in the JetStream store and FastStream's fetch loop resumes.
- Drain: a durable task in flight when `conductor serve all` gets SIGTERM either finishes during the drain (the
  executor stops first while the worker adapter still answers) or, when the drain times out, is nak'ed and finished
  after a restart. Either way exactly one result, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import msgspec
import pytest

from conductor.app.runtime import create_services, running
from conductor.client import ConductorClient, ResultNotReadyError
from conductor.natsserver import NatsServer, free_port
from conductor.settings import CommonSettings
from schemas.solve import ProgressEvent, SolveRequest, progress_subject
from tests.conductor.scrape import wait_status

pytestmark = pytest.mark.e2e

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset
DATA = Path(__file__).resolve().parents[2] / "conductor" / "data"


async def _solve_both_ways(settings: CommonSettings, tag: str) -> None:
    async with ConductorClient(settings) as client:
        result = await client.solve(SolveRequest(question=QUESTION, domain="math", reference="2"), timeout=60)
        assert result.error is None and result.answer, result.error
        task_id = await client.submit(
            SolveRequest(question=QUESTION, task_id=f"{tag}-{uuid.uuid4().hex[:8]}")
        )
        stored = await client.result(task_id, wait=60)
        assert stored.task_id == task_id and stored.error is None and stored.answer


async def test_services_reconnect_and_resubscribe_after_a_nats_restart(tmp_path, subject_prefix):
    nats_port, http_port = free_port(), free_port()
    server = NatsServer(port=nats_port, store_dir=tmp_path / "js").start()
    env = {"NATS_URL": server.url, "CONDUCTOR_SUBJECT_PREFIX": subject_prefix, "CONDUCTOR_LOG_LEVEL": "ERROR"}
    settings = CommonSettings.from_env({**env, "CONDUCTOR_METRICS_PORT": str(http_port)})
    names = ["executor", "planner", "worker-adapter", "verifier"]
    try:
        async with running(create_services(names, env), settings, name="restart"):
            await _solve_both_ways(settings, "before")
            server.stop()
            await wait_status(http_port, "/readyz", 503, timeout=10)
            server = NatsServer(port=nats_port, store_dir=tmp_path / "js").start()
            await wait_status(http_port, "/readyz", 200, timeout=20)
            await _solve_both_ways(settings, "after")
    finally:
        server.stop()


def _slow_pool(tmp: Path, latency_s: float) -> Path:
    """The demo pool with every sim worker taking ``latency_s`` per call, so a task is surely in flight."""
    text = (DATA / "demo_pool.toml").read_text()
    lines = []
    for line in text.splitlines():
        if line.startswith("latency_s"):
            line = f"latency_s = {latency_s}"
        elif line.startswith("dataset"):
            line = f'dataset = "{DATA / "demo_questions.jsonl"}"'
        lines.append(line)
    path = tmp / "slow_pool.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


class Serve:
    """`conductor serve all` with its output in a file (an unread pipe could block it)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> Serve:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "conductor.app.cli", "serve", "all"],
                env={**os.environ, **self.env},
                stderr=fh,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"serving " in self.log.read_bytes()[offset:]:
                return self
            assert self.proc.poll() is None, self.log.read_text()
            time.sleep(0.05)
        raise AssertionError(f"serve all did not come up: {self.log.read_text()}")

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


async def _submit_and_wait_for_first_step(client: ConductorClient, nc_settings: CommonSettings) -> str:
    """Submit a 3-step durable task; return once its first step finished (so it is surely mid-run)."""
    task_id = f"drain-{uuid.uuid4().hex[:8]}"
    first_step = asyncio.Event()
    dec = msgspec.json.Decoder(ProgressEvent)

    async def on_event(msg) -> None:
        if dec.decode(msg.data).kind == "step_done":
            first_step.set()

    assert client._nc is not None
    sub = await client._nc.subscribe(
        nc_settings.subject(progress_subject(client.tenant, task_id)), cb=on_event
    )
    await client.submit(SolveRequest(question=QUESTION, task_id=task_id, policy="refine:3"))
    await asyncio.wait_for(first_step.wait(), 30)
    await sub.unsubscribe()
    return task_id


@pytest.mark.parametrize(
    "drain_timeout_s", [30.0, 0.2], ids=["finishes-while-draining", "released-then-resumed"]
)
async def test_sigterm_with_a_durable_task_in_flight_loses_nothing(
    nats_url, subject_prefix, tmp_path, drain_timeout_s
):
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_POOL": str(_slow_pool(tmp_path, latency_s=0.7)),
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_METRICS_PORT": "off",
        "CONDUCTOR_DRAIN_TIMEOUT_S": str(drain_timeout_s),
    }
    settings = CommonSettings.from_env(env)
    serve = Serve(env, tmp_path / "serve.log").start()
    try:
        async with ConductorClient(settings) as client:
            task_id = await _submit_and_wait_for_first_step(client, settings)
            assert serve.terminate() == 0, serve.log.read_text()
            try:
                result = await client.result(task_id)
                finished_while_draining = True
            except ResultNotReadyError:
                finished_while_draining = False
                serve.start()
                result = await client.result(task_id, wait=30)
        assert finished_while_draining == (drain_timeout_s > 1), serve.log.read_text()
        assert result.task_id == task_id and result.error is None and result.answer
        assert [s.error for s in result.workflows[0].steps] == [None, None, None]
    finally:
        serve.kill()


def test_sigusr1_dumps_every_task_and_the_service_keeps_serving(tmp_path, nats_url, subject_prefix):
    env = {
        "NATS_URL": nats_url,
        "CONDUCTOR_SUBJECT_PREFIX": subject_prefix,
        "CONDUCTOR_LOG_LEVEL": "ERROR",
        "CONDUCTOR_METRICS_PORT": "0",
    }
    serve = Serve(env, tmp_path / "serve.log").start()
    try:
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 20
        while b"--- end of tasks ---" not in serve.log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        dump = serve.log.read_text()
        assert "asyncio tasks ---" in dump and "--- end of tasks ---" in dump, dump[-2000:]
        assert (
            "in _serve_until_stopped" in dump
        )  # the serve coroutine (conductor/app/cli.py), with where it waits
        assert serve.proc.poll() is None
        assert serve.terminate() == 0
    finally:
        serve.kill()
