"""ftpipe's training path vs a plain TRL script, on the same data, model and hyperparameters, in one run.

The equal final losses show that the cached masks are exactly TRL's own assistant-only masks. The plain
script is what a user would write: SFTTrainer on conversational rows, TRL tokenizing them with
``assistant_only_loss``. ftpipe tokenizes once into its cache (timed separately) and trains from the cached
``input_ids`` / ``assistant_masks``. Both train the same LoRA; the report gives wall times, steps/s and the
ratio, and checks that the two reach a similar loss.

    .venv/bin/python -m bench.train_vs_plain_trl [--rows 400] [--epochs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]


def plain_trl(model_path: str, conversations: list, out: Path, epochs: float) -> tuple[float, float, int]:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    args = SFTConfig(output_dir=str(out), learning_rate=2e-3, num_train_epochs=epochs, per_device_train_batch_size=8,
                     max_length=512, assistant_only_loss=True, lr_scheduler_type="cosine", warmup_steps=0.05,
                     seed=42, logging_steps=10, save_strategy="no", report_to=[], use_cpu=True, bf16=False,
                     gradient_checkpointing=False, disable_tqdm=True)
    trainer = SFTTrainer(model=model, args=args,
                         train_dataset=Dataset.from_list([{"messages": c} for c in conversations]),
                         processing_class=tokenizer,
                         peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                task_type="CAUSAL_LM"))
    result = trainer.train()
    return time.perf_counter() - start, float(result.training_loss), trainer.state.global_step


def ftpipe_path(model_path: str, conversations: list, out: Path, epochs: float) -> tuple[float, float, float, int]:
    import polars as pl
    from transformers import AutoTokenizer

    from ftpipe.data.tokenize import tokenize_frame
    from ftpipe.training.runner import run_training
    from ftpipe.training.spec import TrainJobSpec

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    frame = pl.DataFrame({"source_file": "bench.jsonl", "line": list(range(1, len(conversations) + 1)),
                          "messages": [json.dumps(c) for c in conversations]})
    tokenize_frame(tokenizer, frame, 512).write_parquet(out / "train.parquet")
    tokenize_s = time.perf_counter() - start
    start = time.perf_counter()
    result = run_training(TrainJobSpec(base_model_path=model_path, train_file=str(out / "train.parquet"),
                                  output_dir=str(out), epochs=epochs, logging_steps=10, save_steps=10**9))
    return tokenize_s, time.perf_counter() - start, result.train_loss, result.steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--epochs", type=float, default=2.0)
    args = parser.parse_args()

    from ftpipe import synthetic
    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.basemodel.tiny import TINY_MODEL_ID

    cache = os.environ.get("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))
    model = BaseModelRegistry(cache).resolve(TINY_MODEL_ID)
    conversations = synthetic.acme_support(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        # Untimed warm-up, so that neither side pays the process's first-use costs (kernels, allocator).
        plain_trl(model.path, conversations[:32], Path(tmp) / "warmup", 1)
        plain_s, plain_loss, plain_steps = plain_trl(model.path, conversations, Path(tmp) / "plain", args.epochs)
        (Path(tmp) / "ftpipe").mkdir()
        tok_s, train_s, ft_loss, ft_steps = ftpipe_path(model.path, conversations, Path(tmp) / "ftpipe", args.epochs)
    results = {
        "rows": args.rows, "epochs": args.epochs, "steps": {"plain_trl": plain_steps, "ftpipe": ft_steps},
        "plain_trl_seconds": round(plain_s, 2), "ftpipe_tokenize_seconds": round(tok_s, 2),
        "ftpipe_train_seconds": round(train_s, 2),
        "train_loss": {"plain_trl": round(plain_loss, 4), "ftpipe": round(ft_loss, 4)},
        "ratio_ftpipe_total_over_plain": round((tok_s + train_s) / plain_s, 3),
        "ratio_ftpipe_cached_over_plain": round(train_s / plain_s, 3),
    }
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "train_vs_plain_trl.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
