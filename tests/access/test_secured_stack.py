"""The real path on a secured server: every service as its own user, a solve, a durable task, a gateway chat
completion and a slow call's liveness beats all go through, and nothing on the way is refused."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import nats
import pytest

from conductor.client import ConductorClient
from conductor.endpoints import Endpoint, EndpointServer, Requester
from conductor.settings import CommonSettings
from tests.access.conftest import GATEWAY_PORT, services_on
from tests.stack_round_trip import QUESTION, solve_submit_and_chat

pytestmark = pytest.mark.nats


async def test_solve_durable_task_and_chat_as_per_service_users(secured, services):
    before = len(secured.log())
    await solve_submit_and_chat(services, GATEWAY_PORT)  # the user `client`, from the credentials file
    # A refusal can be retried into success: the server log is the witness that nothing was refused.
    assert "Violation" not in secured.log()[before:]


async def test_a_slow_call_beats_many_times_through_allow_responses(secured):
    """A responder may publish to a request's reply subject only after receiving it (allow_responses): the reply
    and every liveness beat of a call that runs for a while (about 15 beats here) all get through."""

    async def slow(body: bytes) -> bytes:
        await asyncio.sleep(1.5)
        return body

    before = len(secured.log())
    planner, executor = await secured.connect("planner"), await secured.connect("executor")
    plan = Endpoint("conductor.plan", queue="planner", title="plan", handler=slow, on_error=lambda info: b"")
    server = EndpointServer(planner, [plan], concurrency=4, drain_timeout_s=1)
    try:
        await server.start()
        await planner.flush()
        await _interest(
            executor, "conductor.plan"
        )  # what is tested is the beats, not how soon interest shows
        reply = await Requester(executor).request("conductor.plan", b"ok", timeout=10, beat_s=0.1, misses=3)
        assert reply.data == b"ok"
    finally:
        await server.stop()
        await planner.close()
        await executor.close()
    assert "Violation" not in secured.log()[before:]


async def _interest(nc, subject: str, within_s: float = 5.0) -> None:
    """Wait until ``subject`` has a responder as ``nc`` sees it (a loaded machine once answered "no responders"
    right after the responder's subscription was flushed)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        try:
            await nc.request(subject, b"", timeout=within_s)
            return
        except nats.errors.NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)
        except nats.errors.TimeoutError:
            return  # someone holds the subject; a probe without a deadline header is not answered in time


async def test_a_client_from_the_credentials_file_connects_as_client(secured):
    settings = CommonSettings.from_env(secured.env)
    async with ConductorClient(settings) as client:
        assert client._nc is not None and client._nc._inbox_prefix == bytearray(b"_INBOX.client")


def test_conductor_solve_against_serve_all_with_its_embedded_server(tmp_path):
    """`serve all --embedded-nats` starts the secured server and says how clients get in; `conductor solve` (a
    request/reply solve and a durable one) then works as the user `client` from the credentials file."""
    from conductor.natsserver import free_port

    env = {
        **os.environ,
        "NATS_URL": f"nats://127.0.0.1:{free_port()}",
        "CONDUCTOR_LOG_LEVEL": "WARNING",
        "CONDUCTOR_METRICS_PORT": "off",
    }
    env.pop("CONDUCTOR_NATS_CREDENTIALS", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as fh:
        server = subprocess.Popen(
            [sys.executable, "-m", "conductor.app.cli", "serve", "all", "--embedded-nats"],
            env=env,
            stderr=fh,
            stdout=fh,
        )
    try:
        deadline = time.monotonic() + 60
        while "clients: " not in log.read_text():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        line = next(ln for ln in log.read_text().splitlines() if ln.startswith("clients: "))
        client_env = {**env, **dict(kv.split("=", 1) for kv in line.removeprefix("clients: ").split())}
        assert "CONDUCTOR_NATS_CREDENTIALS" in client_env and "@" not in client_env["NATS_URL"]
        cli = [sys.executable, "-m", "conductor.app.cli"]
        done = subprocess.run(
            [*cli, "solve", QUESTION, "--domain", "math", "--reference", "2", "--json"],
            env=client_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["verdict"]["outcome"] in {"correct", "incorrect"}
        task = subprocess.run(
            [*cli, "solve", QUESTION, "--detach"], env=client_env, capture_output=True, text=True, timeout=60
        )
        assert task.returncode == 0, task.stderr
        fetched = subprocess.run(
            [*cli, "result", task.stdout.strip(), "--wait", "30", "--json"],
            env=client_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert fetched.returncode == 0, fetched.stderr
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0, log.read_text()


async def test_a_call_claimed_by_another_replica_is_awaited_through_the_ledger(secured, tmp_path):
    """Two worker-adapter replicas get the same durable worker calls at once: the one that did not claim a call
    waits for its record with a watch on the call ledger (a consumer on KV_CONDUCTOR_CALLS), which its user may
    create. (The chaos suite found this path refused; nothing else on the happy path takes it.)"""
    from conductor.app.runtime import create_services, running
    from schemas.work import WORK, ChatMessage, WorkRequest
    from tests.gateway.conftest import slow_pool

    env = {**secured.env, "CONDUCTOR_POOL": str(slow_pool(tmp_path, 0.5)), "CONDUCTOR_LOG_LEVEL": "WARNING"}
    settings = CommonSettings.from_env(env)
    messages = [ChatMessage(role="user", content=QUESTION)]
    calls = [
        WorkRequest(
            worker="sim-math", messages=messages, task_id=f"ledger-{tmp_path.name}-{i}", idempotent=True
        )
        for i in range(8)
    ]
    before = len(secured.log())
    async with (
        running(create_services(["worker-adapter"], env), settings, name="one"),
        running(create_services(["worker-adapter"], env), settings, name="two"),
    ):
        executor = await secured.connect("executor")
        try:
            requester = Requester(executor)
            replies = await asyncio.gather(
                *(requester.call(WORK, c, prefix="", timeout=30) for c in calls * 2)
            )
        finally:
            await executor.close()
    assert [r.error for r in replies] == [None] * len(replies)
    assert sum(r.replayed for r in replies) == len(calls)  # each call paid once, its twin replayed
    assert "Violation" not in secured.log()[before:]


async def test_a_hang_up_cancels_the_task_through_the_gateways_own_subject(secured, tmp_path):
    """Issue 19, item 3 on a secured server: the gateway cancels its hung-up task on conductor.cancel.gateway.<id>,
    which its user alone may publish and every executor hears; the task stops, and nothing is refused."""
    import aiohttp

    from conductor import metrics
    from tests.conductor.scrape import delta, parse
    from tests.gateway.conftest import slow_pool

    before_log = len(secured.log())
    async with services_on(secured, CONDUCTOR_POOL=str(slow_pool(tmp_path, 1.0))):
        before = after = parse(metrics.exposition().decode())
        body = json.dumps({"model": "refine:3", "messages": [{"role": "user", "content": QUESTION}]})
        async with aiohttp.ClientSession() as http:
            with pytest.raises(TimeoutError):  # hang up while the first of three 1-second steps runs
                await asyncio.wait_for(
                    http.post(f"http://127.0.0.1:{GATEWAY_PORT}/v1/chat/completions", data=body), 0.6
                )
        for _ in range(100):
            after = parse(metrics.exposition().decode())
            if delta(before, after, "conductor_tasks_total", outcome="cancelled"):
                break
            await asyncio.sleep(0.1)
    assert delta(before, after, "conductor_tasks_total", outcome="cancelled") == 1
    assert delta(before, after, "conductor_worker_calls_total") < 3
    assert "Violation" not in secured.log()[before_log:]
