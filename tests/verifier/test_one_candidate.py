"""One candidate must never take down a batch (issue 9 item 8): a lone surrogate in what a candidate writes does not
break writing the verdict (CLI, NATS reply), and a candidate that returns tens of MB per call is *incorrect*, not a
verifier error that training would mask."""

from __future__ import annotations

import asyncio
import io
import json

import msgspec
import pytest

from conductor.wire import encode
from schemas.verify import (
    FunctionalTestsReference,
    IOTest,
    Outcome,
    StdioTestsReference,
    TextReference,
    VerifyBatch,
    VerifyBatchResult,
    VerifyRequest,
)
from services.verifier.app import VerifierService
from services.verifier.cli import verify_stream
from services.verifier.core import Verifier
from tests.verifier.conftest import make_settings, sandbox_capable

pytestmark = pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")

ONE = FunctionalTestsReference(func_name="f", tests=[IOTest(input="1", output="1")])
SURROGATE_RAISE = VerifyRequest(
    id="surrogate-raise",
    response="```python\nclass Solution:\n    def f(self, x):\n        raise ValueError('bad \\ud800 value')\n```",
    reference=ONE,
)
SURROGATE_PRINT = VerifyRequest(
    id="surrogate-stderr",
    response="```python\nimport sys\nprint(int(input()) + 1)\nraise SystemExit('oops \\udcff')\n```",
    reference=StdioTestsReference(tests=[IOTest(input="1", output="2")]),
)
SURROGATE_ANSWER = VerifyRequest(
    id="surrogate-answer", response="\\boxed{7\ud800}", reference=TextReference(answer="7")
)
FINE = VerifyRequest(
    id="fine",
    response="```python\nprint(int(input()) * 2)\n```",
    reference=StdioTestsReference(tests=[IOTest(input="2", output="4")]),
)


@pytest.mark.asyncio(loop_scope="session")
async def test_cli_writes_every_verdict_after_a_lone_surrogate(verifier: Verifier) -> None:
    requests = (SURROGATE_RAISE, SURROGATE_PRINT, FINE)  # msgspec refuses a lone-surrogate escape in input
    lines = [
        json.dumps(msgspec.to_builtins(r)) for r in requests
    ]  # json escapes the lone surrogate as \ud800
    out = io.StringIO()
    rc = await asyncio.wait_for(verify_stream(io.StringIO("\n".join(lines)), out, make_settings(), True), 120)
    verdicts = {v["id"]: v for v in map(json.loads, out.getvalue().splitlines())}
    assert rc == 0
    assert verdicts["surrogate-raise"]["outcome"] == "incorrect"
    assert "bad \ufffd value" in verdicts["surrogate-raise"]["reason"]
    assert verdicts["surrogate-stderr"]["outcome"] == "incorrect"
    assert verdicts["fine"]["outcome"] == "correct"


@pytest.mark.asyncio(loop_scope="session")
async def test_nats_reply_encodes_after_a_lone_surrogate(verifier: Verifier) -> None:
    svc = VerifierService(make_settings(), verifier)
    await svc.start(None)  # type: ignore[arg-type]
    result = await svc.handle_verify(VerifyBatch(items=[SURROGATE_RAISE, SURROGATE_ANSWER, FINE]))
    reply = msgspec.json.decode(encode(result), type=VerifyBatchResult)  # the bytes the NATS reply carries
    assert reply.error is None
    assert [v.outcome for v in reply.verdicts] == [Outcome.INCORRECT, Outcome.INCORRECT, Outcome.CORRECT]


@pytest.mark.asyncio(loop_scope="session")
async def test_huge_return_values_are_incorrect_not_an_error(verifier: Verifier) -> None:
    ref = FunctionalTestsReference(
        func_name="f", tests=[IOTest(input=str(i), output=json.dumps("x" * i)) for i in range(1, 4)]
    )
    program = "```python\nclass Solution:\n    def f(self, n):\n        return 'x' * 30_000_000\n```"
    verdict = await verifier.verify(VerifyRequest(id="huge", response=program, reference=ref))
    assert verdict.outcome == Outcome.INCORRECT, verdict.reason
