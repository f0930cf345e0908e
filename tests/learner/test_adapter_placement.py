"""The learner's ``model.adapter`` (issue 34): a job is a client's text, so the adapter it starts from is confined to
the learner's data directory (or is a shipped policy, by name) and allow-listed as the planner's adapters are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor.data import POLICIES
from services.learner.app import LearnerService, LearnerSettings
from services.learner.config import ConfigError, parse_config

SHIPPED = POLICIES / "smollm2-views3"


def _job(adapter: str):
    return parse_config(f'[model]\nsource = "smollm2"\nadapter = "{adapter}"\n')


def _service(root: Path) -> LearnerService:
    return LearnerService(LearnerSettings.from_env({"CONDUCTOR_LEARNER_CHECKPOINT_DIR": str(root)}))


def _adapter(where: Path, **changes: object) -> Path:
    where.mkdir(parents=True)
    config = json.loads((SHIPPED / "adapter_config.json").read_text()) | changes
    (where / "adapter_config.json").write_text(json.dumps(config))
    (where / "adapter_model.safetensors").write_bytes(b"\0" * 16)
    return where


@pytest.mark.parametrize("escape", ["/etc", "../elsewhere", str(SHIPPED)])
def test_an_adapter_outside_the_data_directory_is_refused(tmp_path, escape):
    with pytest.raises(ConfigError, match=r"^model\.adapter: .* is outside CONDUCTOR_LEARNER_CHECKPOINT_DIR"):
        _service(tmp_path / "data").placed(_job(escape), None)


def test_a_shipped_policy_by_name_and_an_adapter_inside_are_placed(tmp_path):
    svc = _service(tmp_path)
    assert svc.placed(_job("smollm2-views3"), None).model.adapter == str(SHIPPED)
    assert svc.placed(_job("conductor/data/policies/smollm2-views3"), None).model.adapter == str(
        SHIPPED
    )  # presets
    _adapter(tmp_path / "adapters" / "mine")
    assert svc.placed(_job("adapters/mine"), None).model.adapter == str(tmp_path / "adapters" / "mine")


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"init_lora_weights": "pissa_niter_3000000"}, "init_lora_weights"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ],
)
def test_an_adapter_peft_would_obey_beyond_a_plain_lora_is_refused(tmp_path, changes, key):
    _adapter(tmp_path / "adapters" / "bad", **changes)
    with pytest.raises(ConfigError, match=f"^model.adapter: .*: {key} = "):
        _service(tmp_path).placed(_job("adapters/bad"), None)
