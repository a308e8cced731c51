"""Every method trains a few steps on the tiny model, saves, reloads and lowers the held-out loss."""

import json

import polars as pl
import pytest
import torch

from ftpipe import synthetic
from ftpipe.training.runner import run_training
from tests.helpers.training import heldout_loss, tiny_spec

pytestmark = pytest.mark.slow


@pytest.mark.quality
@pytest.mark.parametrize("method, lr", [("lora", 2e-3), ("qlora", 2e-3), ("dora", 2e-3), ("rslora", 5e-4),
                                        ("full", 3e-4)])
def test_method_trains_saves_reloads_and_lowers_heldout_loss(method, lr, tiny_model, sft_train_file, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path, tokenizer = sft_train_file
    spec = tiny_spec(tiny_model, path, tmp_path, method=method, learning_rate=lr, epochs=5, logging_steps=6,
                     save_steps=10**6)
    result = run_training(spec)
    assert result.steps == 60
    base = AutoModelForCausalLM.from_pretrained(tiny_model.path)
    heldout = synthetic.acme_support(16, seed=99)
    base_loss = heldout_loss(base, tokenizer, heldout)
    if method == "full":
        tuned = AutoModelForCausalLM.from_pretrained(result.adapter_dir)
    else:
        config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert config["use_dora"] == (method == "dora") and config["use_rslora"] == (method == "rslora")
        # A QLoRA adapter is applied to the full-precision base, as it is served.
        tuned = PeftModel.from_pretrained(base, result.adapter_dir)
    assert heldout_loss(tuned, tokenizer, heldout) < 0.9 * base_loss


def test_qlora_gradients_match_a_full_precision_reference_after_an_eval_forward(tiny_model, sft_train_file):
    import bitsandbytes as bnb
    from bitsandbytes.functional import dequantize_4bit
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    from ftpipe.training.methods import load_base_model, peft_config

    path, _ = sft_train_file
    batch = pl.read_parquet(path).head(4)
    n = min(len(x) for x in batch["input_ids"])
    ids = torch.tensor([x[:n] for x in batch["input_ids"].to_list()])

    torch.manual_seed(0)
    qmodel = get_peft_model(load_base_model(tiny_model.path, "qlora", "float32"),
                            peft_config("qlora", 8, 16, 0.0, "all-linear"))
    # Reference: the same network with each 4-bit weight dequantized into a float32 Linear.
    reference = AutoModelForCausalLM.from_pretrained(tiny_model.path, dtype=torch.float32)
    qlayers = {name: m for name, m in qmodel.base_model.model.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
    for name, module in reference.named_modules():
        base_name = f"{name}.base_layer"
        if base_name in qlayers:
            q = qlayers[base_name]
            module.weight.data = dequantize_4bit(q.weight.data, q.weight.quant_state).to(torch.float32)
    reference = get_peft_model(reference, peft_config("qlora", 8, 16, 0.0, "all-linear"))
    lora_weights = {k: v for k, v in qmodel.state_dict().items() if "lora_" in k}
    missing = reference.load_state_dict(lora_weights, strict=False).unexpected_keys
    assert missing == []

    qmodel.eval()
    with torch.no_grad():
        qmodel(input_ids=ids)  # what evaluate() or generate() does between training steps
    qmodel.train()
    for model in (qmodel, reference):
        model(input_ids=ids, labels=ids).loss.backward()
    qgrads = {n: p.grad for n, p in qmodel.named_parameters() if "lora_A" in n}
    rgrads = dict((n, p.grad) for n, p in reference.named_parameters() if "lora_A" in n)
    assert len(qgrads) == len(qlayers) > 0
    for name, grad in qgrads.items():
        assert torch.allclose(grad, rgrads[name], rtol=1e-3, atol=1e-6), name


def test_activation_checkpointing_trains_the_same_adapter(tiny_model, sft_train_file, tmp_path):
    """Chosen by the plan only when memory needs it; recomputation must not change what is learned."""
    runs = []
    for checkpointing in (False, True):
        spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path / str(checkpointing), max_steps=10,
                         logging_steps=1, save_steps=10**6, activation_checkpointing=checkpointing)
        runs.append(run_training(spec).loss_history)
    assert len(runs[0]) == len(runs[1]) == 10
    assert max(abs(a - b) for (_, a), (_, b) in zip(*runs)) < 1e-5
