"""Packed vs unpacked training on the same data, model and hyperparameters, in one run.

Packing puts whole examples side by side in rows of max_seq_len tokens (best-fit decreasing, padding-free,
attention within each example; tests/test_packing.py checks that). Its gain comes from not computing on
padding, and on a GPU from FlashAttention's variable-length kernels; on the CPU, SDPA over one long row
costs O(L^2) and can lose. This script reports what it sees on the machine it runs on.

    .venv/bin/python -m bench.packing [--rows 600] [--epochs 1] [--max-seq-len 512]
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


def train(model_path: str, train_file: Path, out: Path, packing: bool, epochs: float, max_len: int,
          micro_batch: int) -> dict:
    from ftpipe.training.runner import run_training
    from ftpipe.training.spec import TrainJobSpec

    start = time.perf_counter()
    result = run_training(TrainJobSpec(base_model_path=model_path, train_file=str(train_file), output_dir=str(out),
                                       epochs=epochs, packing=packing, max_seq_len=max_len,
                                       micro_batch_size=micro_batch, logging_steps=10, save_steps=10**9))
    seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), "steps": result.steps, "train_loss": round(result.train_loss, 4)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--max-seq-len", type=int, default=512)
    args = parser.parse_args()

    import polars as pl
    from transformers import AutoTokenizer

    from ftpipe import synthetic
    from ftpipe.basemodel.registry import BaseModelRegistry
    from ftpipe.basemodel.tiny import TINY_MODEL_ID
    from ftpipe.data.tokenize import tokenize_frame

    cache = os.environ.get("FTPIPE_MODEL_CACHE", str(REPO_ROOT / ".cache" / "models"))
    model = BaseModelRegistry(cache).resolve(TINY_MODEL_ID)
    tokenizer = AutoTokenizer.from_pretrained(model.path)
    conversations = synthetic.acme_support(args.rows)
    frame = pl.DataFrame({"source_file": "bench.jsonl", "line": list(range(1, args.rows + 1)),
                          "messages": [json.dumps(c) for c in conversations]})
    with tempfile.TemporaryDirectory() as tmp:
        train_file = Path(tmp) / "train.parquet"
        table = tokenize_frame(tokenizer, frame, args.max_seq_len)
        table.write_parquet(train_file)
        tokens = int(table["input_ids"].list.len().sum() * args.epochs)
        # Untimed warm-up, so that neither side pays the process's first-use costs.
        train(model.path, train_file, Path(tmp) / "warmup", False, 0.05, args.max_seq_len, 8)
        unpacked = train(model.path, train_file, Path(tmp) / "unpacked", False, args.epochs, args.max_seq_len, 8)
        # One packed row of max_seq_len tokens holds many short examples: 1 row per micro-batch keeps the tokens
        # per optimizer step of the same order as 8 unpacked examples.
        packed = train(model.path, train_file, Path(tmp) / "packed", True, args.epochs, args.max_seq_len, 1)
    for side in (unpacked, packed):
        side["tokens_per_second"] = round(tokens / side["seconds"])
    results = {"rows": args.rows, "epochs": args.epochs, "max_seq_len": args.max_seq_len,
               "mean_tokens_per_example": round(tokens / args.epochs / args.rows, 1),
               "unpacked": unpacked, "packed": packed,
               "ratio_packed_over_unpacked_seconds": round(packed["seconds"] / unpacked["seconds"], 3)}
    out_dir = REPO_ROOT / "bench" / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "packing.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
