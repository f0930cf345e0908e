"""One list of provider kinds (issue 35, item 6): conductor/pool.py ``PROVIDER_KINDS``. The pool schema, the
adapters, the default key variables and docs/providers.md follow it; this test fails when one of them does not."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from conductor.pool import PROVIDER_KINDS, PROVIDER_NAMES, PoolError, Provider, parse_pool
from services.worker_adapter.config import DEFAULT_KEY_ENV, key_env
from services.worker_adapter.providers import ADAPTERS, build_providers

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def _sections() -> dict[str, str]:
    """docs/providers.md's kind sections: ``### `name``` -> its text up to the next heading."""
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.MULTILINE)
    return {
        m.group(1): body
        for heading, body in zip(parts[1::2], parts[2::2], strict=True)
        if (m := re.fullmatch(r"### `(\w+)`", heading))
    }


def test_the_pool_schema_names_exactly_the_kinds() -> None:
    assert get_args(Provider) == PROVIDER_NAMES == tuple(k.name for k in PROVIDER_KINDS)
    assert len(set(PROVIDER_NAMES)) == len(PROVIDER_NAMES)
    with pytest.raises(PoolError, match="provider"):
        parse_pool('[[workers]]\nname = "w"\nprovider = "gemini"\nmodel = "m"\n')


def test_every_kind_has_an_adapter_and_nothing_else_does() -> None:
    assert set(ADAPTERS) == set(PROVIDER_NAMES)
    pool = parse_pool(_sections()["sim"].split("```toml\n")[1].split("```")[0])
    built = build_providers(pool, {})
    assert tuple(built) == PROVIDER_NAMES
    assert all(
        callable(getattr(p, "complete", None)) and callable(getattr(p, "aclose", None))
        for p in built.values()
    )
    assert built["openai"] is built["openai_compatible"]  # one client for one wire format


def test_the_default_key_variables_are_the_kinds() -> None:
    assert DEFAULT_KEY_ENV == {k.name: k.key_env for k in PROVIDER_KINDS if k.key_env}


@pytest.mark.parametrize("kind", PROVIDER_KINDS, ids=lambda k: k.name)
def test_every_kind_is_documented_with_a_pool_example_that_parses(kind) -> None:
    sections = _sections()
    assert kind.name in sections, f"docs/providers.md has no section ### `{kind.name}`"
    examples = re.findall(r"```toml\n(.*?)```", sections[kind.name], flags=re.DOTALL)
    assert len(examples) == 1, f"docs/providers.md: section {kind.name} needs one pool example"
    (worker,) = parse_pool(examples[0]).workers
    assert worker.provider == kind.name
    assert key_env(worker) == kind.key_env  # the example relies on the default key, as the section says
    if kind.key_env:
        assert kind.key_env in sections[kind.name]


def test_the_docs_list_no_kind_that_does_not_exist() -> None:
    assert list(_sections()) == list(PROVIDER_NAMES)
