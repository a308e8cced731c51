"""Supervised fine-tuning: TRL's SFTTrainer on ``input_ids`` and ``assistant_masks`` as the pre-flight wrote them.

The loss covers exactly the tokens the mask marks (the assistant's turns and their end-of-turn), so chat data
trains on answers only and prompt/completion data on completions only.
"""

from __future__ import annotations

from typing import Any

from ftpipe.training.spec import TrainJobSpec
from ftpipe.training.validation import evaluation_args, read_eval_table

COLUMNS = ["input_ids", "assistant_masks"]


def _dataset(table):
    from datasets import Dataset

    return Dataset.from_dict({c: table[c].to_list() for c in COLUMNS})


def build_sft_trainer(spec: TrainJobSpec, model, tokenizer, common_args: dict, callbacks: list, peft_config):
    """(trainer, tokens per optimizer step)."""
    import polars as pl
    from trl import SFTConfig, SFTTrainer

    table = pl.read_parquet(spec.train_file, columns=COLUMNS)
    dataset = _dataset(table)
    held_out = read_eval_table(spec.eval_file, COLUMNS)
    eval_dataset = None if held_out is None else _dataset(held_out)
    tokens_per_example = int(table["input_ids"].list.len().sum()) / max(1, table.height)
    # With packing a micro-batch is that many rows of up to max_seq_len tokens, each holding whole examples
    # (best-fit decreasing); position ids restart at each example, and attention stays within it.
    # The held-out split is packed like the train split (TRL's eval_packing default), so that its loss is
    # measured the way the training loss is.
    args = SFTConfig(**common_args, **evaluation_args(spec, eval_dataset is not None), packing=spec.packing,
                     packing_strategy="bfd")
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=eval_dataset,
                         processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    if spec.packing:
        # The packed datasets.Dataset (untyped, so Any here); transformers types the attribute as any torch dataset.
        packed: Any = trainer.train_dataset
        tokens_per_example = sum(len(ids) for ids in packed["input_ids"]) / max(1, len(packed))
    return trainer, tokens_per_example * spec.micro_batch_size * spec.gradient_accumulation_steps
