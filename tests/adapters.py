"""A tiny base model and LoRA adapters on it for the policy-version tests: built in seconds, and told apart by what
they generate (each adapter's ``lora_B`` is random and large, so greedy decoding changes)."""

from __future__ import annotations

from pathlib import Path

from schemas.work import ChatMessage

PROMPT = [ChatMessage(role="user", content="What is 2 + 2? Plan it.")]
TOKENS = 12


def tiny_base(root: Path) -> Path:
    from services.learner import tinymodel

    return tinymodel.build(root / "base", [], layers=1, hidden=32, seed=0)


def make_adapter(base: Path, out: Path, *, seed: int, rank: int = 4) -> Path:
    """A peft LoRA adapter on ``base`` whose update is random (peft starts ``lora_B`` at zero: no change)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        lora_alpha=rank,
        target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 2.0)
    peft_model.save_pretrained(str(out))
    return out


def greedy(base: Path, adapter: Path | None = None) -> str:
    """What the base (with ``adapter`` merged) writes for ``PROMPT``, greedily: computed here with transformers and
    peft directly, to compare the planner's local policy with."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    chat = [{"role": m.role, "content": m.content} for m in PROMPT]
    inputs = tok.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = model.eval().generate(
            **inputs, do_sample=False, max_new_tokens=TOKENS, pad_token_id=tok.pad_token_id
        )
    new = out[0][inputs["input_ids"].shape[1] :].tolist()
    if tok.eos_token_id in new:
        new = new[: new.index(tok.eos_token_id)]
    return tok.decode(new, skip_special_tokens=True)


class Adapters:
    """``base`` with adapters ``a`` and ``b``, and what each of the three writes greedily (all different)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.base = tiny_base(root)
        self.a = make_adapter(self.base, root / "a", seed=1)
        self.b = make_adapter(self.base, root / "b", seed=2)
        self.text = {None: greedy(self.base), "a": greedy(self.base, self.a), "b": greedy(self.base, self.b)}
        assert len(set(self.text.values())) == 3, (
            f"the adapters must be told apart by what they write: {self.text}"
        )
