"""Supervised fine-tuning of a LoRA adapter with TRL's SFTTrainer on the pre-tokenized dataset."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ftpipe.training.spec import TrainJobSpec

MetricsSink = Callable[[dict], None]


@dataclass
class TrainResult:
    adapter_dir: str
    steps: int
    train_loss: float
    final_loss: float
    trained_tokens: int
    seconds: float
    tokens_per_second: float
    loss_history: list[tuple[int, float]]


def _metrics_callback(sink: MetricsSink, history: list[tuple[int, float]], tokens_per_step: float):
    from transformers import TrainerCallback

    class MetricsToSink(TrainerCallback):
        """Forward each logging step (loss, learning rate, grad norm, throughput) to the sink."""

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs:
                return
            elapsed = max(time.monotonic() - self.start, 1e-9)
            history.append((state.global_step, float(logs["loss"])))
            sink({
                "step": state.global_step,
                "max_steps": state.max_steps,
                "loss": float(logs["loss"]),
                "learning_rate": float(logs.get("learning_rate", float("nan"))),
                "grad_norm": float(logs.get("grad_norm", float("nan"))),
                "tokens_per_second": state.global_step * tokens_per_step / elapsed,
            })

    return MetricsToSink()


def run_sft(spec: TrainJobSpec, sink: MetricsSink = lambda m: None) -> TrainResult:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    import polars as pl

    table = pl.read_parquet(spec.train_file, columns=["input_ids", "assistant_masks"])
    n_tokens = int(table["input_ids"].list.len().sum())
    dataset = Dataset.from_dict({
        "input_ids": table["input_ids"].to_list(),
        "assistant_masks": table["assistant_masks"].to_list(),
    })
    tokenizer = AutoTokenizer.from_pretrained(spec.base_model_path)
    model = AutoModelForCausalLM.from_pretrained(spec.base_model_path, dtype=torch.float32)
    on_gpu = torch.cuda.is_available()
    output = Path(spec.output_dir)
    config = SFTConfig(
        output_dir=str(output / "checkpoints"),
        learning_rate=spec.learning_rate,
        num_train_epochs=spec.epochs,
        max_steps=spec.max_steps,
        per_device_train_batch_size=spec.micro_batch_size,
        gradient_accumulation_steps=spec.gradient_accumulation_steps,
        max_length=spec.max_seq_len,
        warmup_steps=spec.warmup_ratio,
        lr_scheduler_type="cosine",
        seed=spec.seed,
        logging_steps=spec.logging_steps,
        logging_nan_inf_filter=False,  # a NaN step must show as NaN, not as loss 0.0
        save_steps=spec.save_steps,
        save_total_limit=2,
        report_to=[],
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    lora = LoraConfig(
        r=spec.lora_r, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
        target_modules=spec.target_modules, task_type="CAUSAL_LM", bias="none",
    )
    history: list[tuple[int, float]] = []
    tokens_per_step = n_tokens / max(1, len(dataset)) * spec.micro_batch_size * spec.gradient_accumulation_steps
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora,
        callbacks=[_metrics_callback(sink, history, tokens_per_step)],
    )
    start = time.monotonic()
    result = trainer.train()
    seconds = time.monotonic() - start
    adapter_dir = output / "adapter"
    trainer.save_model(str(adapter_dir))
    tokenizer.save_pretrained(str(adapter_dir))
    steps = trainer.state.global_step
    trained_tokens = int(tokens_per_step * steps)
    final_loss = history[-1][1] if history else float(result.training_loss)
    if not math.isfinite(final_loss):
        raise FloatingPointError(f"training loss became {final_loss}; lower the learning rate")
    return TrainResult(
        adapter_dir=str(adapter_dir), steps=steps, train_loss=float(result.training_loss), final_loss=final_loss,
        trained_tokens=trained_tokens, seconds=seconds, tokens_per_second=trained_tokens / max(seconds, 1e-9),
        loss_history=history,
    )
