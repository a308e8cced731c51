"""Direct preference optimization: TRL's DPOTrainer on pairs the pre-flight already tokenized.

With a LoRA adapter and no separate reference model, the reference is the base model with the adapter
switched off, so DPO costs one copy of the weights, not two.

The DPO loss only asks the chosen answer to gain on the rejected one relative to the reference, and it can
get there by making both answers less likely ("likelihood displacement"). On the tiny model with
``synthetic.acme_preferences`` (``bench/dpo_displacement.py``), pure DPO reached a held-out preference
accuracy of 1.0 while the chosen answers' log-likelihood fell from -21.9 to -110 nats: the tuned model
preferred the right answer and could no longer say it. Adding the chosen answer's NLL (TRL's ``sft`` loss, as
in RPO) with weight ``dpo_sft_weight`` (default 1; 0 for pure DPO) gave the same accuracy with the chosen
answers at -1.9 nats.
"""

from __future__ import annotations

from ftpipe.training.spec import TrainJobSpec
from ftpipe.training.validation import evaluation_args, read_eval_table

PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")


def _dataset(table):
    from datasets import Dataset

    return Dataset.from_dict({c: table[c].to_list() for c in PAIR_COLUMNS})


def build_dpo_trainer(spec: TrainJobSpec, model, tokenizer, common_args: dict, callbacks: list, peft_config):
    """(trainer, tokens per optimizer step)."""
    import polars as pl
    from trl import DPOConfig, DPOTrainer

    class PretokenizedDPOTrainer(DPOTrainer):
        # The pairs were rendered through the chat template and tokenized once, at the pre-flight, exactly as
        # TRL would (prompt = common prefix); tokenizing them again here would only cost time. The held-out
        # pairs come through here too (TRL prepares eval_dataset with the same method).
        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

    table = pl.read_parquet(spec.train_file, columns=list(PAIR_COLUMNS))
    dataset = _dataset(table)
    held_out = read_eval_table(spec.eval_file, list(PAIR_COLUMNS))
    lengths = table.select(pl.col("prompt_ids").list.len() * 2 + pl.col("chosen_ids").list.len()
                           + pl.col("rejected_ids").list.len()).to_series()
    tokens_per_example = float(lengths.sum()) / max(1, table.height)
    losses = {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, spec.dpo_sft_weight]} \
        if spec.dpo_sft_weight > 0 else {"loss_type": ["sigmoid"]}
    # The validation loss is the same objective on the held-out pairs: the DPO loss plus the weighted NLL.
    args = DPOConfig(beta=spec.dpo_beta, **losses, **common_args, **evaluation_args(spec, held_out is not None))
    trainer = PretokenizedDPOTrainer(model=model, args=args, train_dataset=dataset,
                                     eval_dataset=None if held_out is None else _dataset(held_out),
                                     processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    return trainer, tokens_per_example * spec.micro_batch_size * spec.gradient_accumulation_steps
