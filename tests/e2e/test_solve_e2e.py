"""End to end on a real nats-server: all services, a scripted Conductor policy, sim workers, the real verifier.

The client side uses plain nats-py and JSON only — no project code — as any user's client would.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import nats
import pytest

from conductor.app.runtime import create_services, running
from conductor.settings import CommonSettings
from services.planner.app import PlannerService
from services.planner.config import PlannerSettings
from services.planner.policies.scripted import ScriptedPolicy

pytestmark = pytest.mark.e2e

QUESTION = "What is the remainder when 2^100 is divided by 7?"  # in the bundled sim dataset (answer 2)

COMPLETION = """The question is number theory. I will get two independent solutions and let a strong model
reconcile them, then have it state the final answer.

model_id = [1, 0, 0]
subtasks = ["Solve the problem step by step and box the final answer.",
            "Solve the problem independently and box the final answer.",
            "Compare the two solutions above, check them, and give the correct final answer in \\\\boxed{}."]
access_list = [[], [], ["all"]]
"""

HANDBACK = "The earlier answer is verified and consistent.\nmodel_id = []\nsubtasks = []\naccess_list = []\n"


def scripted(messages) -> str:
    """Round 0 writes a workflow; a recursive call (it sees its earlier completion) hands the answer back."""
    seen = "\n".join(m.content for m in messages)
    return HANDBACK if "model_id = [1, 0, 0]" in seen else COMPLETION


def _env(url: str, prefix: str) -> dict[str, str]:
    return {"NATS_URL": url, "CONDUCTOR_SUBJECT_PREFIX": prefix, "CONDUCTOR_LOG_LEVEL": "WARNING"}


@pytest.fixture
async def system(nats_url, subject_prefix):
    env = _env(nats_url, subject_prefix)
    common = CommonSettings.from_env(env)
    planner = PlannerService(PlannerSettings(common=common, fallback=None), policy=ScriptedPolicy(scripted))
    services = [*create_services(["executor", "worker-adapter", "verifier"], env), planner]
    async with running(services, common, name="e2e"):
        yield subject_prefix


async def test_plain_nats_client_solves_with_progress_recursion_and_verdict(nats_url, system):
    prefix = system
    nc = await nats.connect(nats_url)
    task_id = uuid.uuid4().hex
    events: list[dict] = []

    async def on_event(msg):
        events.append(json.loads(msg.data))

    await nc.subscribe(f"{prefix}conductor.progress.client.{task_id}", cb=on_event)
    request = {"question": QUESTION, "task_id": task_id, "domain": "math", "reference": "2", "max_rounds": 1}
    reply = await nc.request(f"{prefix}conductor.solve.client", json.dumps(request).encode(), timeout=60)
    result = json.loads(reply.data)
    await asyncio.sleep(0.2)
    await nc.close()

    assert result["error"] is None, result["error"]
    assert result["task_id"] == task_id
    first, second = result["workflows"]
    assert [s["worker"] for s in first["steps"]] == ["sim-math", "sim-frontier", "sim-frontier"]
    assert first["steps"][2]["access"] == "all" and first["steps"][0]["access"] == []
    assert second["handback"] is True and second["steps"] == []
    assert result["answer"] == first["steps"][2]["response"]
    assert result["verdict"]["outcome"] in {"correct", "incorrect"}
    assert result["reward"] == (1.0 if result["verdict"]["outcome"] == "correct" else 0.5)
    usage = result["usage"]
    assert usage["total"]["calls"] == 3 + 2  # three worker calls, two planner samples
    assert set(usage["by_worker"]) == {"sim-math", "sim-frontier"}
    assert usage["total"]["cost_usd"] > 0
    kinds = [e["kind"] for e in events]
    assert kinds.count("step_done") == 3 and "planned" in kinds and kinds[-1] == "done"


async def test_bad_input_gets_typed_errors_and_the_service_keeps_serving(nats_url, system):
    prefix = system
    nc = await nats.connect(nats_url)
    cases = [
        (b"{not json", None),
        (b'{"question": ["a"]}', "question"),
        (b'{"question": "q", "pool": ["gpt-99"]}', "pool[0]"),
        (b'{"question": ""}', "question"),
        (b'{"question": "q", "max_rounds": 99}', "max_rounds"),
        (b'{"question": "x' + b"y" * 2_000_000 + b'"}', None),
    ]
    for payload, field in cases:
        try:
            reply = await nc.request(f"{prefix}conductor.solve.client", payload, timeout=20)
        except nats.errors.MaxPayloadError:
            continue  # the server itself refuses payloads over its max_payload (1 MiB by default)
        err = json.loads(reply.data)["error"]
        assert err["code"] in {"bad_request", "payload_too_large"} and err["field"] == field, (
            payload[:40],
            err,
        )
    reply = await nc.request(
        f"{prefix}conductor.solve.client",
        json.dumps({"question": QUESTION, "pool": ["sim-small", "sim-math"]}).encode(),
        timeout=60,
    )
    result = json.loads(reply.data)
    assert result["error"] is None and result["answer"]
    await nc.close()


async def test_durable_submit_and_fetch_result_later(nats_url, system):
    prefix = system
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    task_id = uuid.uuid4().hex
    body = json.dumps({"question": QUESTION, "task_id": task_id}).encode()
    await js.publish(f"{prefix}conductor.tasks.submit.client", body, headers={"Nats-Msg-Id": task_id})
    bucket = "CONDUCTOR_RESULTS_" + prefix.strip(".").upper()
    kv = await js.key_value(bucket)
    for _ in range(200):
        try:
            entry = await kv.get(f"client.{task_id}")  # results are keyed by tenant (docs/tenancy.md)
            break
        except nats.js.errors.KeyNotFoundError:
            await asyncio.sleep(0.05)
    else:
        pytest.fail("no result stored")
    result = json.loads(entry.value)
    assert result["task_id"] == task_id and result["error"] is None and result["answer"]
    await nc.close()


def _cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor.app.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_conductor_solve_against_conductor_serve_all(nats_url, subject_prefix):
    env = _env(nats_url, subject_prefix)
    server = subprocess.Popen(
        [sys.executable, "-m", "conductor.app.cli", "serve", "all"],
        env={**os.environ, **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:  # wait until it says it is serving
            if line.startswith("serving"):
                break
        else:
            pytest.fail(f"serve all exited: {server.wait()}")
        done = _cli("solve", QUESTION, "--domain", "math", "--reference", "2", "--json", env=env)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["error"] is None and result["workflows"][0]["policy"].startswith("moa")
        assert result["verdict"]["outcome"] in {"correct", "incorrect"}
        shown = _cli("solve", QUESTION, "--pool", "sim-math,sim-small", env=env)
        assert shown.returncode == 0, shown.stderr
        assert "answer:" in shown.stdout and "step 0" in shown.stdout
        detached = _cli("solve", QUESTION, "--detach", env=env)
        assert detached.returncode == 0, detached.stderr
        task_id = detached.stdout.strip()
        fetched = _cli("result", task_id, "--wait", "30", "--json", env=env)
        assert fetched.returncode == 0, fetched.stderr
        assert json.loads(fetched.stdout)["task_id"] == task_id
        missing = _cli("result", "no-such-task", env=env)
        assert missing.returncode == 4 and "no result" in missing.stderr
    finally:
        server.terminate()
        assert server.wait(timeout=30) == 0
