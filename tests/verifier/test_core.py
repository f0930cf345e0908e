"""Three outcomes never confused: infrastructure failures are ERROR (masked), bad references are typed errors."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
import structlog

from schemas.errors import ErrorCode
from schemas.verify import (
    IOTest,
    Outcome,
    StdioTestsReference,
    TextReference,
    UnittestReference,
    VerifyRequest,
)
from services.verifier.cli import verify_stream
from services.verifier.config import ALL_LAYERS, Settings
from services.verifier.core import Verifier
from services.verifier.processes import DeadlineExceeded
from tests.verifier.conftest import make_settings, sandbox_capable

CODE = VerifyRequest(
    id="code",
    response="```python\nprint(1)\n```",
    reference=StdioTestsReference(tests=[IOTest(input="", output="1")]),
)


@pytest.mark.asyncio(loop_scope="session")
async def test_our_deadline_is_an_error_not_a_wrong_answer(
    verifier: Verifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def too_slow(request: dict, timeout: float) -> dict:
        raise DeadlineExceeded("no reply within 20.0s")

    monkeypatch.setattr(verifier.math, "call", too_slow)
    verdict = await verifier.verify(
        VerifyRequest(id="m", response=r"\boxed{x+1}", reference=TextReference(answer="1+x"))
    )
    assert verdict.outcome == Outcome.ERROR and verdict.error is not None
    assert verdict.error.code == ErrorCode.VERIFIER_ERROR and verdict.error.retryable


@pytest.mark.asyncio(loop_scope="session")
async def test_bad_reference_and_oversized_response(verifier: Verifier) -> None:
    bad = await verifier.verify(
        VerifyRequest(id="b", response="Answer: A", reference=TextReference(answer="Paris", kind="mcq"))
    )
    assert bad.outcome == Outcome.ERROR and bad.error and bad.error.code == ErrorCode.BAD_REQUEST
    empty = await verifier.verify(
        VerifyRequest(id="e", response="x", reference=StdioTestsReference(tests=[]))
    )
    assert empty.outcome == Outcome.ERROR and empty.error and empty.error.code == ErrorCode.BAD_REQUEST
    huge = await verifier.verify(
        VerifyRequest(
            id="h",
            response="x" * (verifier.settings.max_response_chars + 1),
            reference=TextReference(answer="1"),
        )
    )
    assert huge.outcome == Outcome.INCORRECT
    missing = await verifier.verify(
        VerifyRequest(
            id="l",
            response="def task_func():\n    return 1",
            reference=UnittestReference(
                test="import unittest\nclass T(unittest.TestCase):\n    def test_a(self): pass\n",
                libs=["not_a_real_lib_zz"],
            ),
        )
    )
    assert missing.outcome == Outcome.ERROR and "not_a_real_lib_zz" in missing.reason


@pytest.mark.asyncio(loop_scope="session")
async def test_stream_yields_one_verdict_per_request(verifier: Verifier) -> None:
    requests = [
        VerifyRequest(id=str(i), response=rf"\boxed{{{i}}}", reference=TextReference(answer="3"))
        for i in range(6)
    ]
    seen = [v async for v in verifier.stream(requests)]
    assert sorted(v.id for v in seen) == [str(i) for i in range(6)]
    assert [v.id for v in seen if v.outcome == Outcome.CORRECT] == ["3"]


@pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")
@pytest.mark.asyncio(loop_scope="session")
async def test_every_isolation_layer_is_active_here(verifier: Verifier) -> None:
    layers = verifier.sandbox.layers
    assert layers.backend == "bwrap"
    assert layers.missing == [], layers.describe()
    assert set(ALL_LAYERS) <= set(layers.active)
    total = verifier.settings.limits.memory_mb  # --layers also says how the sample's total memory is bounded
    assert f"memory: {total} MiB per sample, resident (the whole tree" in layers.describe()
    assert f"each <= {total} MiB address space" in layers.describe()


@pytest.mark.asyncio(loop_scope="session")
async def test_required_layer_missing_refuses_code_but_not_math() -> None:
    settings = make_settings(
        CONDUCTOR_SANDBOX_BACKEND="none",
        CONDUCTOR_SANDBOX_REQUIRE="1",
        CONDUCTOR_SANDBOX_WORKERS="1",
        CONDUCTOR_VERIFIER_WORKERS="1",
        CONDUCTOR_SANDBOX_UID_BASE="62000",
    )
    async with Verifier(settings) as refusing:
        assert refusing.sandbox.refusal and "rofs" in refusing.sandbox.refusal
        code = await refusing.verify(CODE)
        assert code.outcome == Outcome.ERROR and code.error and code.error.code == ErrorCode.VERIFIER_ERROR
        assert "required sandbox layers missing" in code.reason
        math = await refusing.verify(
            VerifyRequest(id="m", response=r"\boxed{2}", reference=TextReference(answer="2"))
        )
        assert math.outcome == Outcome.CORRECT


def test_settings_from_env() -> None:
    s = Settings.from_env(
        {
            "CONDUCTOR_SANDBOX_REQUIRE": "netns,uid",
            "CONDUCTOR_VERIFIER_WORKERS": "3",
            "CONDUCTOR_SANDBOX_MEMORY_MB": "512",
            "CONDUCTOR_SANDBOX_HIDE": "/a:/b",
        }
    )
    assert s.sandbox_require == ("netns", "uid") and s.math_workers == 3 and s.limits.memory_mb == 512
    assert s.sandbox_hide == ("/a", "/b")
    assert Settings.from_env({"CONDUCTOR_SANDBOX_REQUIRE": "1"}).sandbox_require == ALL_LAYERS
    assert Settings.from_env({}).sandbox_require == ()


@pytest.mark.asyncio(loop_scope="session")
async def test_cli_streams_verdict_lines() -> None:
    lines = [
        json.dumps({"id": "a", "response": r"\boxed{4}", "reference": {"type": "text", "answer": "4"}}),
        "{not json",
        json.dumps(
            {
                "id": "c",
                "response": "```python\nprint(2)\n```",
                "reference": {"type": "stdio", "tests": [{"input": "", "output": "2"}]},
            }
        ),
    ]
    out = io.StringIO()
    settings = make_settings(CONDUCTOR_SANDBOX_WORKERS="1", CONDUCTOR_VERIFIER_WORKERS="1")
    rc = await asyncio.wait_for(
        verify_stream(io.StringIO("\n".join(lines)), out, settings, ordered=True), 120
    )
    verdicts = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rc == 1  # one line was not a request
    assert [(v["id"], v["outcome"]) for v in verdicts] == [
        ("line-2", "error"),
        ("a", "correct"),
        ("c", "correct"),
    ]


@pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")
@pytest.mark.asyncio(loop_scope="session")
async def test_a_sandbox_that_misses_our_deadline_is_killed_and_replaced(verifier: Verifier) -> None:
    """Our deadline, enforced from the host: the supervisor is killed, the caller gets a typed error, the slot
    comes back warm, and a verdict caught in this becomes ERROR (masked), never INCORRECT."""
    sandbox = verifier.sandbox
    restarts = sandbox.processes.restarts
    job = {"op": "stdio", "program": "import time\ntime.sleep(30)", "stdin": "", "limits": sandbox.limits(30)}
    async with sandbox.lease() as lease:
        with pytest.raises(DeadlineExceeded):
            await lease.call(job, 0.5)
        ok = await sandbox.run(lease, {**job, "program": "print(7)", "limits": sandbox.limits(5)}, 5)
    assert sandbox.processes.restarts == restarts + 1
    assert ok["stdout"] == "7\n" and ok["status"] == "ok"


@pytest.mark.asyncio(loop_scope="session")
async def test_verifier_logs_through_structlog_with_the_task_id(
    verifier: Verifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of ours is logged as a structured event carrying the request's task id, like every other service."""

    async def broken(req: VerifyRequest, started: float) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(verifier, "_dispatch", broken)
    with structlog.testing.capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        verdict = await verifier.verify(VerifyRequest(id="task-42", response="x", reference=CODE.reference))
    assert verdict.outcome == Outcome.ERROR and verdict.error and verdict.error.code == ErrorCode.INTERNAL
    crash = [e for e in logs if e["event"] == "verifier crashed on a request"]
    assert crash and crash[0]["task_id"] == "task-42" and crash[0]["log_level"] == "error"
