"""Automatic hyperparameters and the memory estimate they rest on."""

import pytest

from ftpipe.tenants import PoolConfig
from ftpipe.training.autoconfig import DoesNotFit, auto_hyperparameters
from ftpipe.training.memory import ModelShape, estimate_memory
from ftpipe.training.plan import plan_training

LLAMA2_7B = ModelShape(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000,
                       num_parameters=6_738_415_616)
LLAMA3_70B = ModelShape(hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8, head_dim=128,
                        vocab=128256, num_parameters=70_553_706_496)


def test_lora_parameter_count_matches_peft_for_llama2_7b_rank_16():
    # PEFT reports 39,976,960 trainable parameters for r=16 on all seven projections of Llama-2-7B.
    assert LLAMA2_7B.lora_parameters(16) == 39_976_960


def test_the_tiny_model_gets_the_settings_that_train_it(tiny_model):
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.046)
    plan = plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft", {}, "t.parquet", 135, 180, pool)
    spec = plan.spec
    assert (spec.learning_rate, spec.lora_r, spec.lora_alpha, spec.epochs) == (2e-3, 16, 32, 3)
    # 135 examples: an effective batch of 8 keeps at least 10 optimizer steps per epoch.
    assert (spec.micro_batch_size, spec.gradient_accumulation_steps) == (8, 1)
    automatic = {r["name"] for r in plan.rows if r["source"] == "automatic"}
    assert automatic == {"learning_rate", "lora_r", "lora_alpha", "epochs", "micro_batch_size",
                         "gradient_accumulation_steps", "activation_checkpointing", "eval_steps"}
    # 135 examples in batches of 8 are 17 steps an epoch, 51 in 3 epochs: the validation loss every 5.
    assert spec.eval_steps == 5 and "51 optimizer steps" in {r["name"]: r for r in plan.rows}["eval_steps"]["reason"]
    assert spec.activation_checkpointing is False  # 0.8M parameters fit without recomputation


def test_manifest_values_win_and_are_reported_as_the_tenants(tiny_model):
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.046)
    plan = plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft",
                         {"learning_rate": 1e-4, "lora_r": 4},
                         "t.parquet", 135, 180, pool)
    rows = {r["name"]: r for r in plan.rows}
    assert plan.spec.learning_rate == 1e-4 and rows["learning_rate"]["source"] == "manifest"
    assert plan.spec.lora_alpha == 8  # 2 x the tenant's rank
    assert rows["epochs"]["source"] == "automatic" and "135 examples" in rows["epochs"]["reason"]


def test_max_steps_decides_how_many_epochs_the_cost_estimate_counts(tiny_model):
    pool = PoolConfig(gpu="cpu", gpu_memory_gb=8, peak_tflops=0.046)
    by_epochs = plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft", {}, "t.parquet", 135, 180,
                              pool).spec
    assert by_epochs.epochs_to_run(135) == 3
    by_steps = plan_training(tiny_model.path, tiny_model.num_parameters, "lora", "sft", {"max_steps": 500},
                             "t.parquet", 135, 180, pool).spec
    # 500 optimizer steps of 8 examples each over 135 examples, whatever the epochs say.
    assert by_steps.epochs_to_run(135) == pytest.approx(500 * 8 / 135, rel=1e-3)
    assert by_steps.epochs_to_run(135, gpus=2) == pytest.approx(2 * 500 * 8 / 135, rel=1e-3)


def test_learning_rate_and_rank_follow_model_size():
    lora_7b = auto_hyperparameters(LLAMA2_7B, "lora", 50_000, 2048, 80)
    assert lora_7b["learning_rate"].value == 2e-4 and lora_7b["lora_r"].value == 16
    assert lora_7b["epochs"].value == 1
    assert auto_hyperparameters(LLAMA3_70B, "qlora", 5_000, 512, 80)["lora_r"].value == 64
    assert auto_hyperparameters(LLAMA2_7B, "full", 5_000, 512, 80, gpus=8)["learning_rate"].value == 2e-5


def test_micro_batch_shrinks_to_fit_and_accumulation_keeps_the_effective_batch():
    roomy = auto_hyperparameters(LLAMA2_7B, "lora", 50_000, 512, 80)
    tight = auto_hyperparameters(LLAMA2_7B, "lora", 50_000, 4096, 80)
    for chosen in (roomy, tight):
        assert chosen["micro_batch_size"].value * chosen["gradient_accumulation_steps"].value == 16
        need = estimate_memory(LLAMA2_7B, "lora", 16, 4096 if chosen is tight else 512,
                               chosen["micro_batch_size"].value)
        assert need.total_gb <= 0.9 * 80
    assert tight["micro_batch_size"].value < roomy["micro_batch_size"].value


def test_a_job_that_fits_no_gpu_is_refused_with_the_estimate():
    with pytest.raises(DoesNotFit, match=r"needs \d+\.\d GB per GPU even at micro-batch 1"):
        auto_hyperparameters(LLAMA2_7B, "full", 5_000, 2048, 80)  # 16 bytes x 6.7B parameters alone
    # Sharded over a whole node, the same full fine-tune fits.
    assert auto_hyperparameters(LLAMA2_7B, "full", 5_000, 2048, 80, gpus=8)["micro_batch_size"].value >= 1
    # A 70B model fits one H100 only as QLoRA.
    with pytest.raises(DoesNotFit):
        auto_hyperparameters(LLAMA3_70B, "lora", 5_000, 512, 80)
    assert auto_hyperparameters(LLAMA3_70B, "qlora", 5_000, 512, 80)["micro_batch_size"].value >= 1


def test_memory_estimate_orders_the_methods():
    by_method = {m: estimate_memory(LLAMA2_7B, m, 16, 1024, 4).total_gb for m in ("qlora", "lora", "dora", "full")}
    assert by_method["qlora"] < by_method["lora"] < by_method["dora"] < by_method["full"]
