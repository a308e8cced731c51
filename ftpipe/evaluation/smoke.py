"""The smoke generation before promotion: the adapter must change what the model says, and must stop.

An adapter can pass every static check and still be inert (loaded on the wrong layers, scaled to nothing) or
broken (it never emits the end-of-turn token, so a server generates until its token limit). A few greedy
generations of the base and the tuned model on held-out prompts show both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import cast


@dataclass
class SmokeResult:
    differs: bool
    """At least one prompt gets a different answer from the tuned model than from the base."""
    stops: bool
    """Every tuned answer ends with the end-of-turn token within the token budget."""
    samples: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.differs and self.stops

    def to_dict(self) -> dict:
        return asdict(self) | {"passed": self.passed}

    def to_markdown(self) -> str:
        lines = ["Smoke generation (greedy, held-out prompts):", "", "| prompt | base | tuned | stopped |",
                 "|---|---|---|---|"]
        lines += [f"| {_cell(s['prompt'])} | {_cell(s['base'])} | {_cell(s['tuned'])} | {s['tuned_stopped']} |"
                  for s in self.samples]
        return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:120]


def smoke_generation(base_model_path: str, adapter_dir: str, prompts: list[list[dict]],
                     max_new_tokens: int = 64) -> SmokeResult:
    """``prompts``: conversations up to the user's turn (system and user messages)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, BatchEncoding

    tokenizer = AutoTokenizer.from_pretrained(base_model_path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model_path), adapter_dir).to(device)
    model.eval()
    samples = []
    for messages in prompts:
        # transformers types the result as any of its forms; with return_dict=True it is a BatchEncoding
        encoded = cast(BatchEncoding, tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                                    return_tensors="pt", return_dict=True))
        ids = encoded["input_ids"].to(device)
        kwargs = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id)
        with torch.no_grad():
            tuned = model.generate(input_ids=ids, **kwargs)[0, ids.shape[1]:].tolist()
            with model.disable_adapter():
                base = model.generate(input_ids=ids, **kwargs)[0, ids.shape[1]:].tolist()
        samples.append({
            "prompt": messages[-1]["content"],
            "base": tokenizer.decode(base, skip_special_tokens=True),
            "tuned": tokenizer.decode(tuned, skip_special_tokens=True),
            "tuned_stopped": bool(tuned) and tuned[-1] == tokenizer.eos_token_id,
            "differs": base != tuned,
        })
    return SmokeResult(differs=any(s["differs"] for s in samples), stops=all(s["tuned_stopped"] for s in samples),
                       samples=samples)
