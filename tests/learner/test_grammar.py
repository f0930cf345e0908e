"""The optional list grammar: where it constrains, and that a constrained untrained model writes only list
characters inside the integer lists."""

from __future__ import annotations

import pytest

from services.learner.grammar import ACCESS_CHARS, IDS_CHARS, open_list


@pytest.mark.parametrize(
    ("text", "inside"),
    [
        ("plan\nmodel_id = [0, ", "model_id"),
        ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [[], [', "access_list"),
        ('model_id = [0]\nsubtasks = ["a", ', None),
        ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [[]]', None),
        ("no lists yet", None),
    ],
)
def test_open_list(text: str, inside: str | None) -> None:
    assert open_list(text) == inside


def test_the_tiny_tokenizer_has_tokens_for_every_list(tmp_path) -> None:
    pytest.importorskip("tokenizers")
    from services.learner.grammar import _allowed_tokens
    from services.learner.tinymodel import build_tokenizer, corpus

    tok = build_tokenizer(corpus([], completions=50), vocab_size=400)
    allowed = _allowed_tokens(tok)
    pieces = {k: {tok.decode([i]) for i in v} for k, v in allowed.items()}
    assert {"0", "1", "]"} <= pieces["model_id"] and all(set(p) <= IDS_CHARS for p in pieces["model_id"])
    assert {"[", "]"} <= pieces["access_list"] and all(set(p) <= ACCESS_CHARS for p in pieces["access_list"])
