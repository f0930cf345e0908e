"""All 164 HumanEval canonical solutions pass through the sandboxed verifier, and a mutated wrong version of each fails."""

from __future__ import annotations

import pytest

from evaluation.mutants import mutate_completion
from schemas.verify import Outcome
from services.verifier.core import Verifier
from tasks.datasets import humaneval_canonical, load_humaneval
from tests.verifier.conftest import sandbox_capable

pytestmark = pytest.mark.skipif(not sandbox_capable(), reason="needs root and a working bubblewrap")


@pytest.mark.asyncio(loop_scope="session")
async def test_every_canonical_passes_and_every_mutant_fails(verifier: Verifier) -> None:
    problems = load_humaneval()
    canonical = humaneval_canonical()
    assert len(problems) == 164
    requests = [p.request(canonical[p.id], f"{p.id}|canonical") for p in problems]
    requests += [
        p.request(mutate_completion(canonical[p.id], p.reference.entry_point), f"{p.id}|mutant")
        for p in problems
    ]
    verdicts = await verifier.verify_batch(requests)
    wrong = [
        f"{v.id}: {v.outcome} ({v.reason})"
        for v in verdicts
        if v.outcome != (Outcome.CORRECT if v.id.endswith("canonical") else Outcome.INCORRECT)
    ]
    assert not wrong, "\n".join(wrong)
