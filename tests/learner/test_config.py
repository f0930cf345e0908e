"""The run config: presets load, and a malformed file is a ConfigError naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.learner.config import (
    OLD_COLD_START_KEYS,
    ColdStartSection,
    ConfigError,
    RejectionSection,
    SearchSection,
    SyntheticSection,
    load_config,
    parse_config,
)
from services.learner.recipes import is_recipe, load_recipe

PRESETS = sorted((Path(__file__).parents[2] / "services" / "learner" / "presets").glob("*.toml"))

MINIMAL = '[model]\nsource = "tiny"\n'


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_loads(path: Path) -> None:
    """A preset is a learner config or a recipe (services/learner/recipes.py), whose every stage is one."""
    configs = [s.config for s in load_recipe(str(path)).stages] if is_recipe(path) else [load_config(path)]
    assert configs and all(c.grpo.generations >= 2 for c in configs)


def test_paper_preset_has_the_papers_values() -> None:
    """docs/method.md §4: 200 iterations, 4 x 64, temperature 1.0, lr 1e-6 cosine, warm-up 0.03, AdamW (0.9,
    0.999), clip 0.2, no KL, 1024 completion tokens; workers at 4096 tokens and temperature 0.2."""
    c = load_config(Path(__file__).parents[2] / "services" / "learner" / "presets" / "paper.toml")
    g = c.grpo
    assert (g.steps, g.questions_per_step, g.generations, c.step_batch) == (200, 4, 64, 256)
    assert (g.temperature, g.learning_rate, g.lr_scheduler, g.warmup_ratio) == (1.0, 1e-6, "cosine", 0.03)
    assert (g.adam_beta1, g.adam_beta2, g.epsilon, g.beta, g.max_completion_tokens) == (
        0.9,
        0.999,
        0.2,
        0.0,
        1024,
    )
    assert (c.workers.max_tokens, c.workers.temperature) == (4096, 0.2)
    assert c.model.path.endswith("Qwen2.5-7B-Instruct")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[grpo]\ngenerations = 1\n", "grpo.generations"),
        ("[grpo]\nlearning_rate = 'fast'\n", "grpo.learning_rate"),
        ("[grpo]\nstepz = 3\n", "stepz"),
        ("[data]\nk_min = 4\nk_max = 2\n", "data.k_min"),
        ("[data]\ndomains = ['math']\n", "data.domains"),
        ("[data]\nfamily = 'sim'\n", "data.family"),
        ("[data]\ntasks = []\n", "data.tasks"),
        ("[[data.tasks]]\nname = 'gsm8k'\n", "data.tasks[0]"),
        ("[[data.tasks]]\nname = 'sim'\nweight = 0\n", "data.tasks[0].weight"),
        ("[recursion]\nfraction = 1.5\n", "recursion.fraction"),
        ("[grpo]\nscale_rewards = 'group'\n[recursion]\nfraction = 0.5\n", "grpo.scale_rewards"),
        ("[grpo]\nmicro_batch = 7\n", "grpo.micro_batch"),
        ("[generation]\nuse_vllm = true\nvllm_mode = 'server'\n", "generation.vllm_server_base_url"),
        ("[model.lora]\nr = 0\n", "model.lora.r"),
        ("[cold_start.synthetic]\ntopologies = ['star']\n", "cold_start.synthetic.topologies"),
        ("[cold_start.synthetic]\nexamplez = 3\n", "examplez"),
        ("[cold_start.rejection]\nselect = 'worst'\n", "cold_start.rejection.select"),
        ("[cold_start.search]\ndraws = 0\n[data]\nfresh_draws = true\n", "cold_start.search.draws"),
    ],
)
def test_malformed_config_names_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        parse_config(text if "[model" in text else MINIMAL + text)


def test_path_model_needs_a_path() -> None:
    with pytest.raises(ConfigError, match=r"model\.path"):
        parse_config("[model]\nsource = 'path'\n")


def test_not_toml_and_missing_file() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_config("[grpo\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(Path("/nonexistent/learner.toml"))


def test_every_flat_cold_start_key_moved_to_its_methods_table() -> None:
    """Issue 35: each old flat key maps to a key that exists where the message says (or is a table's switch)."""
    where = {
        "[cold_start]": ColdStartSection,
        "[cold_start.synthetic]": SyntheticSection,
        "[cold_start.rejection]": RejectionSection,
        "[cold_start.search]": SearchSection,
    }
    for old, new in OLD_COLD_START_KEYS.items():
        table, _, key = new.partition(" ")
        assert key in where[table].__struct_fields__ or key.startswith("(the table present"), (old, new)
    old_fields = {"sft", "rejection", "search", "topologies"}
    old_fields |= {f"sft_{k}" for k in ("examples", "epochs", "learning_rate", "batch_size", "accumulation")}
    old_fields |= {"sft_save_steps"} | {f"rejection_{k}" for k in RejectionSection.__struct_fields__}
    old_fields |= {f"search_{k}" for k in SearchSection.__struct_fields__}
    assert set(OLD_COLD_START_KEYS) == old_fields


@pytest.mark.parametrize(
    ("old", "value"), [(k, "true" if "_" not in k else "1") for k in OLD_COLD_START_KEYS]
)
def test_an_old_flat_cold_start_key_is_refused_naming_its_new_place(old: str, value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(f"{MINIMAL}[cold_start]\n{old} = {value}\n")
    message = str(raised.value)
    assert message == f"cold_start.{old} moved: {OLD_COLD_START_KEYS[old]}" and "\n" not in message


def test_the_old_switches_are_refused_off_as_well_as_on() -> None:
    with pytest.raises(ConfigError, match=re.escape("cold_start.sft moved: [cold_start.synthetic]")):
        parse_config(MINIMAL + "[cold_start]\nsft = false\n")
    with pytest.raises(
        ConfigError, match=re.escape("cold_start.sft_examples moved: [cold_start.synthetic] examples")
    ):
        parse_config(MINIMAL + "[cold_start]\nsft_examples = 64\n")
    with pytest.raises(ConfigError, match=re.escape("cold_start.rejection moved: [cold_start.rejection]")):
        parse_config(MINIMAL + "[cold_start]\nrejection = false\n")
    with pytest.raises(
        ConfigError, match=re.escape("cold_start.search_draws moved: [cold_start.search] draws")
    ):
        parse_config(MINIMAL + "[data]\nfresh_draws = true\n[cold_start]\nsearch = true\nsearch_draws = 8\n")


def test_a_methods_table_turns_it_on_and_its_absence_off() -> None:
    none = parse_config(MINIMAL).cold_start
    assert (none.cascade, none.search, none.synthetic, none.rejection) == (None, None, None, None)
    on = parse_config(MINIMAL + "[cold_start.rejection]\nsamples = 2\n").cold_start
    assert on.rejection == RejectionSection(samples=2) and on.synthetic is None and on.search is None
    empty = parse_config(MINIMAL + "[cold_start.rejection]\n[cold_start.synthetic]\n").cold_start
    assert empty.rejection == RejectionSection() and empty.synthetic == SyntheticSection()


def test_the_shared_keys_stay_in_cold_start() -> None:
    c = parse_config(
        MINIMAL + "[cold_start]\nlearning_rate = 5e-4\nbatch_size = 2\naccumulation = 4\nsave_steps = 3\n"
    ).cold_start
    assert (c.learning_rate, c.batch_size, c.accumulation, c.save_steps) == (5e-4, 2, 4, 3)


def test_the_methods_run_in_the_pipelines_order_whatever_order_the_file_writes(monkeypatch, tmp_path) -> None:
    """cascade, search, synthetic (stage "sft"), then each rejection round: the order before the tables."""
    from services.learner import pipeline

    config = parse_config(
        MINIMAL + "[data]\nfresh_draws = true\nrounds = 1\n"
        "[cold_start.rejection]\nrounds = 2\n[cold_start.synthetic]\nepochs = 3.0\n"
        "[cold_start.search]\nepochs = 4.0\n[cold_start.cascade]\nepochs = 5.0\n"
    )
    ran = []

    def supervised(self, name, model_path, rows, epochs):
        ran.append((name, epochs))
        return tmp_path / name

    def rejection(self, r, model_path):
        ran.append((f"rejection round {r}", None))
        return model_path

    monkeypatch.setattr(pipeline._Run, "_supervised", supervised)
    monkeypatch.setattr(pipeline._Run, "_rejection", rejection)
    none = dict.fromkeys(("stages", "note", "pool", "reward", "grammar"))
    run = pipeline._Run(config=config, out=tmp_path, mix=[], train=[], probe=[], eval_eps=[], **none)
    assert run.cold_start(tmp_path / "base", None) == tmp_path / "sft"
    assert ran == [
        ("cascade", 5.0),
        ("search", 4.0),
        ("sft", 3.0),
        ("rejection round 1", None),
        ("rejection round 2", None),
    ]
