"""The trained policy as a small adapter (services/learner/export.py): the SVD export of ``tuned − base``.

A tiny Llama is built in code; a LoRA with known, random weights is merged into a copy ("the trained policy");
exporting the difference at that rank must give back the same function, and a model whose norms changed cannot be
an adapter.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from services.learner.coldstart import save_merged  # noqa: E402
from services.learner.export import ExportError, export_adapter, load_with_adapter, low_rank  # noqa: E402
from services.learner.tinymodel import build  # noqa: E402
from tasks import sim  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    questions = sim.tasks("train")[:50]
    return build(tmp_path_factory.mktemp("tiny") / "base", questions, layers=2, hidden=64, seed=0)


def _tuned(base: Path, out: Path, rank: int, seed: int) -> Path:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    from transformers import AutoTokenizer

    save_merged(peft_model, AutoTokenizer.from_pretrained(str(base)), out)
    return out


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_an_export_at_the_trained_rank_reproduces_the_tuned_model(base: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    tuned = _tuned(base, tmp_path / "tuned", rank=4, seed=1)
    figures = export_adapter(base, tuned, tmp_path / "adapter", rank=4)
    assert figures["energy_kept_min"] > 0.999
    assert figures["layers"] == 2 * 7
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    ids = torch.randint(0, 500, (2, 24))
    want = _logits(AutoModelForCausalLM.from_pretrained(str(tuned), dtype=torch.float32), ids)
    got = _logits(load_with_adapter(base, tmp_path / "adapter"), ids)
    plain = _logits(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), ids)
    assert (got - want).abs().max() < 0.02 * (plain - want).abs().max()  # float16 storage, not the base model


def test_a_lower_rank_keeps_part_of_the_update_and_says_how_much(base: Path, tmp_path: Path) -> None:
    tuned = _tuned(base, tmp_path / "tuned", rank=8, seed=2)
    figures = export_adapter(base, tuned, tmp_path / "adapter", rank=2)
    assert 0.1 < figures["energy_kept_mean"] < 0.95
    small = figures["bytes"]
    assert small < export_adapter(base, tuned, tmp_path / "adapter8", rank=8)["bytes"]


def test_a_changed_norm_is_not_an_adapter(base: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    with torch.no_grad():
        model.model.norm.weight.add_(0.1)
    model.save_pretrained(str(tmp_path / "full"))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(tmp_path / "full"))
    with pytest.raises(ExportError, match="norm"):
        export_adapter(base, tmp_path / "full", tmp_path / "adapter", rank=4)


def test_an_unchanged_model_and_a_zero_rank_are_refused(base: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="does not differ"):
        export_adapter(base, base, tmp_path / "adapter", rank=4)
    with pytest.raises(ExportError, match="rank"):
        export_adapter(base, base, tmp_path / "adapter", rank=0)


def test_low_rank_is_exact_for_a_rank_one_matrix() -> None:
    delta = torch.outer(torch.arange(1.0, 5.0), torch.tensor([1.0, -2.0, 0.5]))
    b, a, kept = low_rank(delta, 3)
    assert torch.allclose(b @ a, delta, atol=1e-5) and kept == pytest.approx(1.0)


def test_a_lora_run_ends_with_its_adapter_measured_and_resumes_past_it(tmp_path: Path) -> None:
    """The pipeline's ``adapter`` stage on a tiny LoRA run, rewards in process (tests/learner/fakes.py)."""
    import msgspec

    from bench.fakes import SkillScorer
    from services.learner import pipeline
    from services.learner.config import LoraSection, load_config
    from services.learner.stream import load_run_pool

    config = load_config(Path(__file__).parents[2] / "services" / "learner" / "presets" / "tiny-sim.toml")
    r = msgspec.structs.replace
    config = r(
        config,
        model=r(config.model, lora=LoraSection(r=4, alpha=8, dropout=0.0, target_modules="all-linear")),
        data=r(config.data, eval_questions=8, eval_samples=1),
        cold_start=r(config.cold_start, synthetic=r(config.cold_start.synthetic, examples=64), parse_probe=8),
        grpo=r(config.grpo, steps=2, questions_per_step=2, generations=2),
        output=r(config.output, dir=str(tmp_path / "run"), adapter_rank=12),
    )
    stages = pipeline.run(config, SkillScorer(load_run_pool(config)))
    adapter = stages["adapter"]
    assert adapter["rank"] == 12 and adapter["energy_kept_min"] > 0.99  # two stages of rank 4: rank <= 8 < 12
    assert 0.0 <= adapter["parse_rate"] <= 1.0 and "raw_reward_mean" in adapter["held_out"]
    assert (tmp_path / "run" / "adapter" / "adapter_model.safetensors").is_file()
    again = pipeline.run(config, SkillScorer(load_run_pool(config)), resume=True)
    assert again["adapter"]["finished"] == adapter["finished"]


def test_the_export_command_writes_an_adapter_and_names_a_bad_input(
    base: Path, tmp_path: Path, capsys
) -> None:
    from services.learner.export import main

    tuned = _tuned(base, tmp_path / "tuned", rank=2, seed=3)
    assert main([str(base), str(tuned), str(tmp_path / "adapter"), "--rank", "2"]) == 0
    assert (
        '"rank": 2' in capsys.readouterr().out and (tmp_path / "adapter" / "conductor-export.json").is_file()
    )
    assert main([str(base), str(base), str(tmp_path / "same"), "--rank", "2"]) == 2
    assert "does not differ" in capsys.readouterr().err


def test_the_card_goes_beside_the_weights_with_the_bases_fingerprint(base: Path, tmp_path: Path) -> None:
    """Issue 18, item 2: the policy card travels with the adapter, and into a policy version with it."""
    from transformers import AutoModelForCausalLM

    from conductor.policy_versions import adapter_files, fingerprint, read_card
    from conductor.prompt import view_fingerprint, worker_fingerprint
    from schemas.learner import PolicyCard
    from services.learner.pipeline import policy_card
    from services.learner.recipes import load_recipe
    from services.learner.stream import load_run_pool

    config = (
        load_recipe("smollm2-views3").stages[0].config
    )  # stage 1, `route` (once the preset `smollm2-route`)
    pool = load_run_pool(config)
    card = policy_card(config, pool)
    assert (card.prompt, card.temperature, card.max_tokens, card.trained_by) == (
        "task",
        0.5,
        192,
        "smollm2-views3-route",  # the recipe's run of that stage; only the last stage's is the policy's name
    )
    # Trained on the full pool in pool order: the card names that one view (a pointer into its numbering).
    assert card.view == view_fingerprint(pool.cards(pool.subset(None)))
    shuffled = msgspec.structs.replace(config, data=msgspec.structs.replace(config.data, shuffle_view=True))
    assert card.workers == []
    varied = policy_card(shuffled, pool)  # trained on views of the pool: served on views of its workers
    assert varied.view == "" and len(varied.workers) == len(pool.workers) == len(set(varied.workers))
    assert varied.workers == sorted(worker_fingerprint(w) for w in pool.cards(pool.workers))
    # GRPO explores at 1.0; the card serves the policy at the temperature the run names for serving.
    hot = msgspec.structs.replace(config, grpo=msgspec.structs.replace(config.grpo, temperature=1.0))
    assert policy_card(hot, pool).temperature == 1.0
    cooled = msgspec.structs.replace(hot, output=msgspec.structs.replace(hot.output, serve_temperature=0.5))
    assert policy_card(cooled, pool).temperature == 0.5
    export_adapter(
        base, _tuned(base, tmp_path / "tuned", rank=2, seed=3), tmp_path / "adapter", rank=2, card=card
    )
    written = read_card(tmp_path / "adapter")
    assert isinstance(written, PolicyCard) and written.prompt == "task"
    assert written.base == fingerprint(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32))
    assert "conductor-policy.json" in {p.name for p in adapter_files(tmp_path / "adapter")}  # packed with it


def test_a_stopped_sft_resumes_from_its_newest_checkpoint(base: Path, tmp_path: Path) -> None:
    """A session stopped mid-SFT loses at most ``cold_start.save_steps`` steps: the next run continues from the checkpoint
    made on the same rows, and other rows start afresh."""
    from transformers import TrainerCallback

    from services.learner import coldstart
    from services.learner.config import parse_config

    config = parse_config(
        f'[model]\nsource = "tiny"\npath = "{base}"\n[cold_start]\nsave_steps = 2\n'
        "batch_size = 2\n[model.lora]\nr = 4\n"
    )
    rows = coldstart.synthetic_rows(sim.tasks("train")[:40], load_pool_for(config), config, 12, seed=0)

    class Stopped(Exception):
        """The session's end, mid-epoch."""

    class Stop(TrainerCallback):
        def __init__(self, at: int | None = 3) -> None:
            self.first, self.at = None, at

        def on_step_end(self, args, state, control, **kwargs):
            self.first = self.first or state.global_step
            if state.global_step == self.at:
                raise Stopped

    with pytest.raises(Stopped):
        coldstart.sft(config, base, rows, tmp_path / "sft", epochs=1.0, callbacks=[Stop()])
    assert (tmp_path / "sft.work" / "checkpoint-2").is_dir()
    again = Stop(at=None)
    coldstart.sft(config, base, rows, tmp_path / "sft", epochs=1.0, callbacks=[again])
    assert again.first == 3 and (tmp_path / "sft" / "config.json").is_file()  # continued after checkpoint 2
    assert not (tmp_path / "sft.work").exists()
    with pytest.raises(Stopped):
        coldstart.sft(config, base, rows, tmp_path / "other", epochs=1.0, callbacks=[Stop()])
    fresh = Stop()
    with pytest.raises(Stopped):
        coldstart.sft(config, base, rows[:-2], tmp_path / "other", epochs=1.0, callbacks=[fresh])
    assert fresh.first == 1  # other rows: the old checkpoints are not reused


def load_pool_for(config):
    from services.learner.stream import load_run_pool

    return load_run_pool(config)
