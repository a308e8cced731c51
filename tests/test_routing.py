"""Admission routing: the smallest pool whose slot fits the job, or a refusal that shows the estimate."""

from ftpipe.routing import route
from ftpipe.tenants import load_platform_config
from ftpipe.training.autoconfig import auto_hyperparameters
from resources.settings import REPO_ROOT
from tests.test_autoconfig import LLAMA2_7B, LLAMA3_70B

PLATFORM = load_platform_config(REPO_ROOT / "tenants.yaml")


def test_jobs_go_to_the_smallest_slot_that_fits():
    assert route(PLATFORM, LLAMA2_7B, "lora", "sft", 2048).pool == "h100x1"
    # A full fine-tune of 7B needs its optimizer state sharded: FSDP over a 4-GPU slot.
    assert route(PLATFORM, LLAMA2_7B, "full", "sft", 2048).pool == "h100x4"
    # 70B fits one H100 only as QLoRA, and only with activation checkpointing.
    assert route(PLATFORM, LLAMA3_70B, "qlora", "sft", 2048).pool == "h100x1"


def test_a_job_that_fits_nowhere_is_refused_pool_by_pool():
    decision = route(PLATFORM, LLAMA3_70B, "lora", "sft", 2048)
    assert decision.pool is None
    refusal = decision.refusal()
    assert refusal.startswith("the job fits no GPU pool: cpu-local: lora of a 70.6B-parameter model at 2048 tokens")
    for pool in ("h100x1", "h100x4", "h100x8"):
        assert f"{pool}: lora of a 70.6B-parameter model" in refusal  # DDP replicates the 141 GB of bf16 weights


def test_dpo_fits_half_the_examples_per_micro_batch():
    """A DPO example is a chosen and a rejected sequence in the same forward pass."""
    sft = auto_hyperparameters(LLAMA2_7B, "lora", 50_000, 1024, 80)["micro_batch_size"].value
    dpo = auto_hyperparameters(LLAMA2_7B, "lora", 50_000, 1024, 80, sequences_per_example=2)["micro_batch_size"].value
    assert sft >= 2 and dpo == sft // 2
