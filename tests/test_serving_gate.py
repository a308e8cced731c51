"""The serving-compatibility gate, on real PEFT adapters of the tiny model."""

import json
import shutil

import torch

from ftpipe.catalog.serving import ServingProfile, check_adapter


def _adapter(tiny_model, out, trained=True, **lora):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model.path),
                           LoraConfig(**{"r": 8, "lora_alpha": 16, "target_modules": "all-linear", **lora}))
    if trained:
        torch.manual_seed(0)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.01)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model.path).save_pretrained(out)
    return out


def test_a_plain_lora_adapter_is_servable(tiny_model, tmp_path):
    assert check_adapter(_adapter(tiny_model, tmp_path / "a"), tiny_model, ServingProfile()).problems == []


def test_rank_above_the_fleets_maximum_is_refused(tiny_model, tmp_path):
    result = check_adapter(_adapter(tiny_model, tmp_path / "a", r=128, lora_alpha=256), tiny_model,
                           ServingProfile(max_lora_rank=64))
    assert result.problems == ["rank 128 is above the servers' max_lora_rank 64"]


def test_dora_is_refused_unless_allowed(tiny_model, tmp_path):
    adapter = _adapter(tiny_model, tmp_path / "a", use_dora=True)
    assert any(p.startswith("DoRA adapters are not served") for p in
               check_adapter(adapter, tiny_model, ServingProfile()).problems)
    assert check_adapter(adapter, tiny_model, ServingProfile(allow_dora=True)).compatible


def test_modules_to_save_bias_and_unknown_targets_are_refused(tiny_model, tmp_path):
    adapter = _adapter(tiny_model, tmp_path / "a", modules_to_save=["lm_head"], bias="lora_only")
    problems = check_adapter(adapter, tiny_model, ServingProfile(target_modules=("q_proj", "v_proj"))).problems
    assert any("modules_to_save ['lm_head'] is not served" in p for p in problems)
    assert any("bias 'lora_only' is not served" in p for p in problems)
    assert any(p.startswith("target modules ['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'up_proj']")
               for p in problems)


def test_another_tokenizer_template_base_or_base_version_is_refused(tiny_model, tmp_path):
    adapter = _adapter(tiny_model, tmp_path / "a")
    (adapter / "chat_template.jinja").write_text("{{ messages }}")
    tokenizer = json.loads((adapter / "tokenizer.json").read_text())
    tokenizer["added_tokens"][0]["content"] = "<unk2>"
    (adapter / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "other/model"}))
    problems = check_adapter(adapter, tiny_model, ServingProfile(), trained_on_digest="0" * 64).problems
    assert problems == [
        f"trained on base 'other/model', registered for '{tiny_model.model_id}'",
        f"base '{tiny_model.model_id}' is now version {tiny_model.digest[:12]}, trained on 000000000000",
        "its tokenizer differs from the base model's",
        "its chat template differs from the base model's",
    ]


def test_an_adapter_that_changes_nothing_is_refused(tiny_model, tmp_path):
    adapter = _adapter(tiny_model, tmp_path / "a", trained=False)
    assert check_adapter(adapter, tiny_model, ServingProfile()).problems == [
        "every lora_B weight is zero: the adapter would change nothing (did training run?)"]


def test_a_full_model_is_not_an_adapter(tiny_model, tmp_path):
    shutil.copytree(tiny_model.path, tmp_path / "full")
    assert check_adapter(tmp_path / "full", tiny_model, ServingProfile()).problems[0].startswith(
        "no adapter_config.json")


def test_smoke_generation_catches_an_inert_adapter(tiny_model, tmp_path):
    from ftpipe import synthetic
    from ftpipe.evaluation.smoke import smoke_generation

    prompts = [conversation[:2] for conversation in synthetic.acme_support(2, seed=11)]
    inert = smoke_generation(tiny_model.path, str(_adapter(tiny_model, tmp_path / "inert", trained=False)), prompts)
    assert not inert.differs and not inert.passed
    assert [s["base"] for s in inert.samples] == [s["tuned"] for s in inert.samples]
    assert "| prompt | base | tuned | stopped |" in inert.to_markdown()
