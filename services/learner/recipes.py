"""Recipes: a shipped policy reproduced from nothing by one command (``conductor train --recipe NAME``).

A recipe is one TOML file in ``services/learner/presets/`` with a ``[base]`` learner config and ``[[stage]]``
overlays, each naming only what its stage changes (prime-rl's stage-1/stage-2 files are the model). Stage *k*'s
config is the base with the overlays of stage *k* merged over it — tables merge key by key, everything else
(scalars, arrays, arrays of tables) is replaced — and the stages are chained through run directories: stage *k*
writes ``runs/<recipe>/<k>-<stage>/`` and stage *k + 1* starts from its exported adapter (``adapter/``, when the
stage exports one: ``output.adapter_rank``) or its merged policy (``policy/``) — never from a shipped adapter, so
the chain reproduces the policy from the base model alone. An overlay that sets ``model.adapter`` or ``model.path``
itself starts where it says instead (the first stage of a recipe that continues a registered policy).

Only the last stage's adapter is the policy: ``conductor/data/policies/<policy>/`` ships it (export.py), its
``README.md`` the measured figures; the registry (conductor/policies.py) names the recipe.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.learner.config import ConfigError, LearnerConfig, parse_raw

PRESETS = Path(__file__).parent / "presets"
RUNS = Path("runs")

STAGE_KEYS = frozenset({"name"})
"""A stage's own keys beside its overlay (its ``name`` names the stage, not the run: the recipe names runs)."""


class RecipeError(ConfigError):
    """A recipe that cannot be read or whose stages do not make learner configs."""


@dataclass(frozen=True)
class Stage:
    name: str
    config: LearnerConfig
    out: Path  # its run directory (the config's output.dir)

    @property
    def finished(self) -> bool:
        """Its result is written: the exported adapter, else the final policy (``conductor train --recipe
        --resume`` skips it)."""
        kind, where = self.result
        return (where / ("adapter_model.safetensors" if kind == "adapter" else "config.json")).is_file()

    @property
    def result(self) -> tuple[str, Path]:
        """What the next stage starts from: ("adapter", dir) when this stage exports one, else ("path", policy)."""
        if self.config.output.adapter_rank:
            return "adapter", self.out / "adapter"
        return "path", self.out / "policy"


@dataclass(frozen=True)
class Recipe:
    name: str
    policy: str  # the registered policy the last stage is (conductor/policies.py); "" for a test recipe
    stages: tuple[Stage, ...]

    def stage(self, name: str) -> int:
        """The index of the stage named ``name``."""
        names = [s.name for s in self.stages]
        if name not in names:
            raise RecipeError(f"recipe {self.name}: no stage {name!r}; its stages are {names}")
        return names.index(name)


def is_recipe(path: Path) -> bool:
    """A preset file with ``[[stage]]`` tables (the others are single-stage learner configs)."""
    try:
        return "stage" in tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return False


def find(name: str) -> Path:
    """A recipe by name (``presets/<name>.toml``) or by path."""
    path = Path(name)
    if path.suffix == ".toml" and path.is_file():
        return path
    found = PRESETS / f"{name}.toml"
    if not found.is_file() or not is_recipe(found):
        known = sorted(p.stem for p in PRESETS.glob("*.toml") if is_recipe(p))
        raise RecipeError(f"no recipe {name!r}; the recipes are {known}")
    return found


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``base``: tables merged key by key (recursively), any other value replaced."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_recipe(name: str, *, runs: Path = RUNS) -> Recipe:
    path = find(name)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RecipeError(f"recipe {path}: {exc}") from exc
    unknown = sorted(set(raw) - {"name", "policy", "base", "stage"})
    if unknown:
        raise RecipeError(f"recipe {path}: unknown top-level keys {unknown} (name, policy, base, [[stage]])")
    recipe = str(raw.get("name") or path.stem)
    base, stages = raw.get("base"), raw.get("stage")
    if not isinstance(base, dict) or not isinstance(stages, list) or not stages:
        raise RecipeError(f"recipe {path}: needs a [base] table and at least one [[stage]]")
    policy = str(raw.get("policy", ""))
    built: list[Stage] = []
    for i, overlay in enumerate(stages, 1):
        # the last stage's run is the policy: its card's trained_by names it, as the shipped card does
        run_name = policy if policy and i == len(stages) else ""
        built.append(_stage(recipe, i, base, overlay, built[-1] if built else None, runs, run_name))
    return Recipe(name=recipe, policy=policy, stages=tuple(built))


def _stage(
    recipe: str,
    index: int,
    base: dict[str, Any],
    overlay: dict[str, Any],
    previous: Stage | None,
    runs: Path,
    run_name: str,
) -> Stage:
    name = overlay.get("name")
    if not isinstance(name, str) or not name:
        raise RecipeError(f"recipe {recipe}: stage {index} needs a name")
    changes = {k: v for k, v in overlay.items() if k not in STAGE_KEYS}
    if "dir" in changes.get("output", {}):
        raise RecipeError(f"recipe {recipe}, stage {name}: output.dir is the recipe's to set")
    raw = merge(base, changes)
    out = runs / recipe / f"{index}-{name}"
    raw["name"] = run_name or f"{recipe}-{name}"
    raw["output"] = {**raw.get("output", {}), "dir": str(out)}
    model = dict(raw.get("model", {}))
    overlay_model = changes.get("model", {})
    if previous is not None and not ({"adapter", "path"} & set(overlay_model)):
        c = previous.config
        if not c.output.adapter_rank and not c.grpo.steps:
            raise RecipeError(
                f"recipe {recipe}: stage {previous.name} leaves nothing for stage {name} to start from: it "
                "exports no adapter (output.adapter_rank) and runs no GRPO (its policy/)"
            )
        kind, where = previous.result
        if kind == "adapter":
            model["adapter"] = str(where)
        else:
            model.update(source="path", path=str(where), adapter="")
    raw["model"] = model
    try:
        config = parse_raw(raw)
    except ConfigError as exc:
        raise RecipeError(f"recipe {recipe}, stage {name}: {exc}") from exc
    return Stage(name=name, config=config, out=out)
