"""How each fine-tuning method loads the base model and what PEFT config it trains.

    lora    LoRA on all linear projections of a full-precision base
    qlora   LoRA on a 4-bit NF4 base (bitsandbytes, double quantization)
    dora    weight-decomposed LoRA (PEFT ``use_dora``); not servable by vLLM
    rslora  rank-stabilized LoRA scaling (PEFT ``use_rslora``)
    full    every weight trains; the output is a whole model, not an adapter
"""

from __future__ import annotations

ADAPTER_METHODS = ("lora", "qlora", "dora", "rslora")
METHODS = (*ADAPTER_METHODS, "full")


def compute_dtype(name: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    return getattr(torch, name)


def load_base_model(path: str, method: str, qlora_compute_dtype: str = "auto"):
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    if method != "qlora":
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute_dtype(qlora_compute_dtype),
    )
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=quantization, dtype=torch.float32)
    guard_4bit_cpu_gradients(model)
    return model


def guard_4bit_cpu_gradients(model) -> int:
    """Keep 4-bit layers differentiable on CPUs with AVX512-BF16 (bitsandbytes 0.50).

    There, the first no-grad forward in eval mode (evaluate(), generate()) repacks each ``Linear4bit`` in place
    for an inference kernel without autograd, and training afterwards silently drops the input gradients of
    every 4-bit layer. Turning the kernel off before any forward keeps the gradients exact
    (``tests/test_training_methods.py`` compares them with a full-precision reference).
    """
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def peft_config(method: str, r: int, alpha: int, dropout: float, target_modules):
    from peft import LoraConfig

    if method == "full":
        return None
    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                      task_type="CAUSAL_LM", bias="none", use_dora=method == "dora", use_rslora=method == "rslora")
