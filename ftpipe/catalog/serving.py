"""The serving-compatibility gate: will a multi-LoRA server (vLLM) load this adapter, on this base model?

vLLM refuses, at load time and in production, adapters it cannot serve: a rank above ``--max-lora-rank``,
DoRA, ``modules_to_save``, biases, target modules it does not implement for the architecture. An adapter
trained against another tokenizer or chat template loads fine and answers wrongly. All of that is checked
here, before promotion, from the adapter's own files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ftpipe.basemodel.registry import ResolvedBaseModel, tokenizer_digests

LLAMA_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ServingProfile(BaseModel):
    """What the serving fleet accepts (the platform configuration's ``serving:`` section)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_lora_rank: int = Field(default=64, description="vLLM's --max-lora-rank on the serving fleet")
    target_modules: tuple[str, ...] = LLAMA_PROJECTIONS
    allow_dora: bool = False
    allow_modules_to_save: bool = False


@dataclass
class Compatibility:
    problems: list[str] = field(default_factory=list)

    @property
    def compatible(self) -> bool:
        return not self.problems


def check_adapter(adapter_dir: str | Path, base: ResolvedBaseModel, profile: ServingProfile,
                  trained_on_digest: str | None = None) -> Compatibility:
    """``base``: the base model as the registry resolves it now; ``trained_on_digest``: its version digest when
    the adapter was trained (a base model replaced in place since then would serve a different network)."""
    adapter_dir = Path(adapter_dir)
    result = Compatibility()
    problems = result.problems
    config_path = adapter_dir / "adapter_config.json"
    if not config_path.is_file():
        problems.append("no adapter_config.json: not a PEFT adapter (a full fine-tune is served as a model)")
        return result
    config = json.loads(config_path.read_text())

    ranks = [config.get("r", 0), *(config.get("rank_pattern") or {}).values()]
    if max(ranks) > profile.max_lora_rank:
        problems.append(f"rank {max(ranks)} is above the servers' max_lora_rank {profile.max_lora_rank}")
    targets = config.get("target_modules") or []
    targets = [targets] if isinstance(targets, str) else targets
    unsupported = sorted(set(targets) - set(profile.target_modules))
    if unsupported:
        problems.append(f"target modules {unsupported} are not served (served: {', '.join(profile.target_modules)})")
    if config.get("use_dora") and not profile.allow_dora:
        problems.append("DoRA adapters are not served (vLLM loads LoRA only); retrain with method lora or rslora")
    if config.get("modules_to_save") and not profile.allow_modules_to_save:
        problems.append(f"modules_to_save {config['modules_to_save']} is not served")
    if config.get("bias", "none") != "none":
        problems.append(f"bias '{config['bias']}' is not served (only 'none')")

    if config.get("base_model_name_or_path") not in (base.model_id, base.path):
        problems.append(f"trained on base '{config.get('base_model_name_or_path')}', registered for '{base.model_id}'")
    if trained_on_digest and trained_on_digest != base.digest:
        problems.append(f"base '{base.model_id}' is now version {base.digest[:12]}, "
                        f"trained on {trained_on_digest[:12]}")
    tokenizer_digest, template_digest = tokenizer_digests(adapter_dir)
    if tokenizer_digest and tokenizer_digest != base.tokenizer_digest:
        problems.append("its tokenizer differs from the base model's")
    if template_digest and template_digest != base.chat_template_digest:
        problems.append("its chat template differs from the base model's")
    problems.extend(_weight_problems(adapter_dir / "adapter_model.safetensors"))
    return result


def _weight_problems(weights: Path) -> list[str]:
    if not weights.is_file():
        return ["no adapter_model.safetensors"]
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        names = list(f.keys())
        if not names:
            return ["adapter_model.safetensors holds no tensors"]
        # LoRA's B matrices start at zero: an adapter whose B are all still zero changes nothing.
        lora_b = [n for n in names if "lora_B" in n]
        if lora_b and all(float(f.get_tensor(n).abs().max()) == 0.0 for n in lora_b):
            return ["every lora_B weight is zero: the adapter would change nothing (did training run?)"]
    return []
