"""GRPO step time with rewards over NATS vs an in-process reward function, on the same tiny model (issue 12).

Printed, not asserted. Both runs: the tiny model of services/learner/presets/tiny-sim.toml, cold-started by a short
SFT, then ``STEPS`` GRPO steps of 8 questions x 8 completions. "nats": every completion goes to the executor's
rollout subject (executor, planner, worker-adapter and verifier in this process on an embedded nats-server, sim
workers with their pool latency, real verification). "in-process": a scripted reward (bench/fakes.py: the
last worker's skill for the domain) called directly, no NATS, no workers, no verifier. The split per step is from
metrics.jsonl (services/learner/telemetry.py): generation / rollout / update. Target (issue 12): overhead <= 10%.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fakes import SkillScorer  # noqa: E402
from conductor.app.training import local_rollouts  # noqa: E402
from services.learner import coldstart, policy  # noqa: E402
from services.learner.bridge import LoopThread  # noqa: E402
from services.learner.config import load_config  # noqa: E402
from services.learner.pipeline import grpo_stage  # noqa: E402
from services.learner.rewards import ConductorReward  # noqa: E402
from services.learner.stream import load_run_pool, problems, shares  # noqa: E402
from services.learner.telemetry import read_lines  # noqa: E402

STEPS = 12
SKIP = 2  # warm-up steps left out of the medians


def run(config, model: Path, score, out: Path) -> list[dict]:
    mix, pool = shares(config, "train"), load_run_pool(config)
    grpo_stage(
        config, model, mix, pool, ConductorReward(score, config), out, resume=False, note=lambda *_: None
    )
    return [line for line in read_lines(out / "metrics.jsonl") if line["stage"] == "grpo"][SKIP:]


def summary(name: str, lines: list[dict]) -> dict[str, float]:
    med = {
        k: statistics.median(line[k] for line in lines)
        for k in ("step_s", "generation_s", "rollout_s", "update_s")
    }
    print(
        f"{name:>10}: step {med['step_s']:.3f} s = generation {med['generation_s']:.3f} + rollout "
        f"{med['rollout_s']:.3f} + update {med['update_s']:.3f} (median of {len(lines)} steps)"
    )
    return med


def main() -> None:
    base = load_config(ROOT / "services" / "learner" / "presets" / "tiny-sim.toml")
    with tempfile.TemporaryDirectory(prefix="learner-bench-") as tmp:
        root = Path(tmp)
        config = msgspec.structs.replace(
            base,
            model=msgspec.structs.replace(base.model, path=str(root / "base")),
            grpo=msgspec.structs.replace(base.grpo, steps=STEPS, save_steps=10_000),
            output=msgspec.structs.replace(base.output, dir=str(root)),
        )
        train, pool = problems(config, "train"), load_run_pool(config)
        started = time.perf_counter()
        model = policy.prepare_base(config, train)
        rows = coldstart.synthetic_rows(train, pool, config, 1000)
        model = coldstart.sft(config, model, rows, root / "sft", epochs=1.0)
        print(
            f"tiny model cold-started in {time.perf_counter() - started:.0f} s; {STEPS} GRPO steps each, "
            f"{config.step_batch} completions per step"
        )
        local = run(config, model, SkillScorer(pool), root / "inproc")
        with LoopThread() as loop, local_rollouts(loop, config) as score:
            remote = run(config, model, score, root / "nats")
        a, b = summary("in-process", local), summary("nats", remote)
        # The two runs sample different completions (their policies drift apart) on a shared CPU, so the step
        # difference carries generation/update noise; the reward call's own difference is the NATS path's cost.
        print(
            f"step time, nats vs in-process: {b['step_s'] - a['step_s']:+.3f} s ({(b['step_s'] - a['step_s']) / a['step_s']:+.1%}); "
            f"reward call: {b['rollout_s']:.3f} s vs {a['rollout_s']:.3f} s, overhead "
            f"{(b['rollout_s'] - a['rollout_s']) / a['step_s']:+.1%} of an in-process step"
        )


if __name__ == "__main__":
    main()
