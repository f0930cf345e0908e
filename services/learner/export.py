"""A trained policy as a small LoRA adapter on its base model: what the project ships and what a policy version is.

The run's stages merge each LoRA into full weights (SFT → rejection → GRPO, coldstart.save_merged), so the trained
policy is a full model directory of the base model's size (540 MB for SmolLM2-135M). What it learned, though, is a
sum of low-rank updates to the linear layers: ``policy − base`` has rank at most the sum of the stages' LoRA ranks.
``export_adapter`` takes that difference per linear weight, keeps its top ``rank`` singular directions
(``ΔW ≈ B·A`` with ``B = U·S``, ``A = Vᵀ``), and writes a standard peft LoRA adapter (``lora_alpha = r``, so the
scale is 1) in float16: a few MB, loadable by ``peft.PeftModel.from_pretrained`` on the base model, by vLLM's
run-time LoRA loading, and by the planner's local backend.

The truncation is an approximation when the stages' ranks add up to more than ``rank``; the export reports the
share of the update's energy (squared singular values) it kept, per layer (minimum and mean), and the pipeline
measures the adapter's parse rate and held-out reward beside the full policy's, so the shipped figure is the
adapter's own. Anything but the linear weights differing from the base (embeddings, norms: a full fine-tune) is
refused with ``ExportError``: an adapter cannot carry it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from conductor.policy_versions import fingerprint, write_card
from schemas.learner import PolicyCard

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear layers a LoRA on ``all-linear`` adapts in a Llama-family decoder (SmolLM2, Qwen2.5, the tiny model)."""

UNCHANGED_ATOL = 1e-6
"""A non-linear parameter differing from the base by more than this cannot go into the adapter."""

MANIFEST = "conductor-export.json"


class ExportError(RuntimeError):
    """The tuned model cannot be expressed as a LoRA adapter on this base (the message says which parameter)."""


def _target(name: str) -> str | None:
    """The module path of a targeted linear weight (``model.layers.0.self_attn.q_proj``), else None."""
    if not name.endswith(".weight"):
        return None
    module = name[: -len(".weight")]
    return module if module.rsplit(".", 1)[-1] in TARGETS else None


def _load(path: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)


def _state(model: Any) -> dict[str, Any]:
    return {k: v.detach() for k, v in model.state_dict().items()}


def low_rank(delta: Any, rank: int) -> tuple[Any, Any, float]:
    """``(B, A, kept)``: ``delta ≈ B @ A`` with ``B`` (out × r) and ``A`` (r × in), and the energy share kept."""
    import torch

    u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    r = min(rank, s.numel())
    total = float((s**2).sum())
    kept = float((s[:r] ** 2).sum()) / total if total > 0 else 1.0
    return u[:, :r] * s[:r], vh[:r], kept


def export_adapter(
    base_dir: Path, tuned_dir: Path, out_dir: Path, *, rank: int, card: PolicyCard | None = None
) -> dict[str, Any]:
    """Write ``tuned − base`` as a rank-``rank`` float16 peft LoRA adapter to ``out_dir``; the export's figures.
    With a ``card`` (how the policy was trained to be served), it is written beside the weights with the base
    model's fingerprint filled in."""
    import torch
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise ExportError(f"rank must be at least 1, got {rank}")
    model = _load(base_dir)  # read once: its weights are the reference, then it carries the adapter
    base, tuned = _state(model), _state(_load(tuned_dir))
    base_print = fingerprint(model) if card is not None else ""
    if base.keys() != tuned.keys():
        raise ExportError(f"{tuned_dir} and {base_dir} are different architectures")
    updates: dict[str, tuple[Any, Any]] = {}
    kept: list[float] = []
    for name, w in base.items():
        delta = tuned[name] - w
        module = _target(name)
        if module is None:
            if delta.abs().max().item() > UNCHANGED_ATOL:
                raise ExportError(
                    f"{name} differs from the base model and is not a LoRA target: not an adapter"
                )
            continue
        if delta.abs().max().item() == 0.0:
            continue
        b, a, share = low_rank(delta, rank)
        updates[module] = (b, a)
        kept.append(share)
    if not updates:
        raise ExportError(f"{tuned_dir} does not differ from {base_dir}: nothing to export")
    targets = sorted({m.rsplit(".", 1)[-1] for m in updates})
    lora = LoraConfig(
        r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, lora)
    modules = dict(peft_model.base_model.model.named_modules())
    with torch.no_grad():
        for module, (b, a) in updates.items():
            layer = modules[module]
            r = a.shape[0]
            layer.lora_A["default"].weight.zero_()
            layer.lora_B["default"].weight.zero_()
            layer.lora_A["default"].weight[:r] = a
            layer.lora_B["default"].weight[:, :r] = b
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.data = param.data.to(torch.float16)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(str(out_dir), safe_serialization=True)
    size = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file())
    figures = {
        "rank": rank,
        "layers": len(updates),
        "targets": targets,
        "energy_kept_min": round(min(kept), 4),
        "energy_kept_mean": round(sum(kept) / len(kept), 4),
        "bytes": size,
        "base": str(base_dir),
    }
    (out_dir / MANIFEST).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    if card is not None:
        write_card(out_dir, msgspec.structs.replace(card, base=base_print))
    return figures


def load_with_adapter(base_dir: Path, adapter_dir: Path) -> Any:
    """The base model with the adapter merged in (float32), for measuring or serving it like any model."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    return PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()


def main(argv: list[str] | None = None) -> int:
    """``python -m services.learner.export BASE TUNED OUT --rank R``: export outside a run (e.g. a policy trained in
    several runs, each starting from the last one's ``policy/``, exported against the original base)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m services.learner.export", description=main.__doc__)
    p.add_argument("base", type=Path, help="the base model directory the adapter applies to")
    p.add_argument("tuned", type=Path, help="the trained policy (a full model directory)")
    p.add_argument("out", type=Path, help="the adapter directory to write")
    p.add_argument("--rank", type=int, default=8)
    args = p.parse_args(argv)
    try:
        figures = export_adapter(args.base, args.tuned, args.out, rank=args.rank)
    except (ExportError, OSError) as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
