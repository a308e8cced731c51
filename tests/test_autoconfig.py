"""Automatic hyperparameters and the memory estimate they rest on."""

import pytest

from ftpipe.tenants import PoolConfig
from ftpipe.training.autoconfig import DoesNotFit, auto_hyperparameters
from ftpipe.training.memory import GB, TRAINABLE_BYTES_PER_PARAM, ModelShape, estimate_memory
from ftpipe.training.plan import plan_training

LLAMA2_7B = ModelShape(hidden=4096, intermediate=11008, layers=32, heads=32, kv_heads=32, head_dim=128, vocab=32000,
                       num_parameters=6_738_415_616)
LLAMA3_70B = ModelShape(hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8, head_dim=128,
                        vocab=128256, num_parameters=70_553_706_496)


# The seven projections of a Llama decoder layer, which ``ModelShape.linear_shapes`` lists and PEFT's
# "all-linear" (the platform's default ``target_modules``) adapts; lm_head is never adapted.
PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
# Parameter-count checks ask PEFT itself, on models built on the meta device: every tensor has its shape and
# no storage, so a 70B model costs no memory and no download.
ASKS_PEFT = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")


def _meta_llama(shape: ModelShape, tie_word_embeddings: bool = False):
    """A ``LlamaForCausalLM`` of ``shape`` on the meta device. Llama-2-7B and Llama-3-70B untie their input
    embeddings and lm_head, so their ``num_parameters`` count both vocabulary matrices."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim, vocab_size=shape.vocab,
                         tie_word_embeddings=tie_word_embeddings)
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def _peft_trainable_parameters(model, shape: ModelShape, method: str, rank: int) -> int:
    """Wrap ``model`` as the runner does (``peft_config`` with the spec's default target modules) and count
    what PEFT makes trainable, after checking it adapted exactly the projections the formula counts."""
    from peft import get_peft_model
    from peft.tuners.lora import LoraLayer

    from ftpipe.training.methods import peft_config
    from ftpipe.training.spec import TrainJobSpec

    config = peft_config(method, rank, 2 * rank, 0.0, TrainJobSpec("", "", "").target_modules)
    # low_cpu_mem_usage: the adapter weights are created on the meta device too, not materialised on the CPU.
    model = get_peft_model(model, config, low_cpu_mem_usage=True)
    adapted = [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]
    assert {name.rsplit(".", 1)[-1] for name, _ in adapted} == PROJECTIONS
    assert sorted((m.in_features, m.out_features) for _, m in adapted) == sorted(shape.linear_shapes() * shape.layers)
    assert all(p.is_meta for p in model.parameters())  # nothing was allocated
    trainable, _ = model.get_nb_trainable_parameters()
    assert trainable == sum(p.numel() for p in model.parameters() if p.requires_grad) > 0
    return trainable


def _trainable_in_estimate(shape: ModelShape, method: str, rank: int) -> int:
    """The trainable parameters ``estimate_memory`` charges ``TRAINABLE_BYTES_PER_PARAM`` bytes each for."""
    state_gb = estimate_memory(shape, method, rank, seq_len=1, micro_batch=1).training_state_gb
    return round(state_gb * GB / TRAINABLE_BYTES_PER_PARAM)


@pytest.mark.parametrize("shape", [LLAMA2_7B, LLAMA3_70B], ids=["llama2-7b", "llama3-70b"])
def test_base_parameter_count_is_the_untied_llamas(shape):
    model = _meta_llama(shape, tie_word_embeddings=False)
    assert model.num_parameters() == shape.num_parameters
    # Tied, lm_head would share the embedding matrix: the constants would be off by one vocab x hidden matrix.
    tied = _meta_llama(shape, tie_word_embeddings=True)
    assert tied.num_parameters() == shape.num_parameters - shape.vocab * shape.hidden


@ASKS_PEFT
@pytest.mark.parametrize("method", ["lora", "dora"])
@pytest.mark.parametrize("shape, rank", [(LLAMA2_7B, 16), (LLAMA3_70B, 8), (LLAMA3_70B, 64)],
                         ids=["llama2-7b-r16", "llama3-70b-r8", "llama3-70b-r64"])
def test_trainable_parameters_match_peft(shape, rank, method):
    # Llama-3-70B has grouped-query attention (8 KV heads of 64): its k and v projections are 8x narrower than q.
    trainable = _peft_trainable_parameters(_meta_llama(shape), shape, method, rank)
    assert _trainable_in_estimate(shape, method, rank) == trainable
    if method == "lora":
        assert shape.lora_parameters(rank) == trainable
    else:  # DoRA adds a magnitude vector of each adapted projection's output width
        assert shape.lora_parameters(rank) < trainable


@ASKS_PEFT
@pytest.mark.parametrize("method", ["lora", "dora"])
def test_the_tiny_models_shape_and_trainable_parameters_match_transformers_and_peft(tiny_model, method):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = ModelShape.from_pretrained_dir(tiny_model.path, tiny_model.num_parameters)
    config = AutoConfig.from_pretrained(tiny_model.path)
    assert shape.kv_heads < shape.heads  # grouped-query attention, as in Llama-3-70B
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # The tiny model ties lm_head to the embeddings: the safetensors count (num_parameters) holds the matrix once,
    # and so does the model.
    assert config.tie_word_embeddings
    assert model.num_parameters() == shape.num_parameters
    trainable = _peft_trainable_parameters(model, shape, method, 16)
    assert _trainable_in_estimate(shape, method, 16) == trainable
    if method == "lora":
        assert shape.lora_parameters(16) == trainable


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
