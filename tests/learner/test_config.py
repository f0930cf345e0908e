"""The run config: presets load, and a malformed file is a ConfigError naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.learner.config import ConfigError, load_config, parse_config

PRESETS = sorted((Path(__file__).parents[2] / "services" / "learner" / "presets").glob("*.toml"))

MINIMAL = '[model]\nsource = "tiny"\n'


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_loads(path: Path) -> None:
    config = load_config(path)
    assert config.grpo.generations >= 2


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
        ("[cold_start]\ntopologies = ['star']\n", "cold_start.topologies"),
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
