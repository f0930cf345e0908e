"""Data shipped with the package: the demo pool and questions, and trained policies (``policies/<name>/``: a peft
LoRA adapter on its base model, with ``conductor-export.json`` and a README saying how it was made)."""

from __future__ import annotations

from pathlib import Path

POLICIES = Path(__file__).parent / "policies"


def shipped_policies() -> list[str]:
    return (
        sorted(p.name for p in POLICIES.iterdir() if (p / "adapter_config.json").is_file())
        if POLICIES.is_dir()
        else []
    )


def adapter_path(ref: str) -> Path:
    """``ref`` as an adapter directory: a path, or the name of a shipped policy (``smollm2-views3``)."""
    path = Path(ref)
    if path.is_dir():
        return path
    if "/" not in ref and (POLICIES / ref / "adapter_config.json").is_file():
        return POLICIES / ref
    raise ValueError(
        f"no adapter directory at {ref!r} (a directory, or a shipped policy: {shipped_policies()})"
    )
