"""Packing: whole examples share a row, but no token attends to, or is positioned after, another example's."""

import polars as pl
import pytest
import torch

from ftpipe.training.runner import run_training
from ftpipe.training.sft import build_sft_trainer
from tests.helpers.training import tiny_spec

pytestmark = pytest.mark.slow


def test_a_packed_row_gives_every_example_exactly_its_unpacked_logits_and_labels(tiny_model, sft_train_file,
                                                                                  tmp_path):
    from transformers import AutoModelForCausalLM

    path, tokenizer = sft_train_file
    model = AutoModelForCausalLM.from_pretrained(tiny_model.path, dtype=torch.float32).eval()
    spec = tiny_spec(tiny_model, path, tmp_path, packing=True, max_seq_len=256, micro_batch_size=1)
    trainer, _ = build_sft_trainer(spec, model, tokenizer, dict(output_dir=str(tmp_path), max_length=256,
                                   use_cpu=True, report_to=[], per_device_train_batch_size=1), [], None)
    masks = {tuple(ids): mask for ids, mask in pl.read_parquet(path).select("input_ids", "assistant_masks").iter_rows()}
    packed = trainer.train_dataset[0]
    assert len(packed["seq_lengths"]) >= 3  # several whole examples in one row
    batch = trainer.data_collator([packed])
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0]
    start = 0
    for length in packed["seq_lengths"]:
        alone_ids = torch.tensor([packed["input_ids"][start:start + length]])
        with torch.no_grad():
            alone = model(input_ids=alone_ids).logits[0]
        assert (logits[start:start + length] - alone).abs().max().item() < 1e-4
        # The labels are the example's own assistant tokens; its first token predicts nothing across the seam.
        mask = masks[tuple(packed["input_ids"][start:start + length])]
        labels = batch["labels"][0, start:start + length]
        assert labels[0].item() == -100
        assert [int(v != -100) for v in labels[1:].tolist()] == mask[1:]
        start += length


def test_packed_training_trains(tiny_model, sft_train_file, tmp_path):
    spec = tiny_spec(tiny_model, sft_train_file[0], tmp_path, packing=True, max_seq_len=256, micro_batch_size=2,
                     max_steps=20, logging_steps=5)
    result = run_training(spec)
    assert result.outcome == "completed" and result.steps == 20
    assert result.loss_history[-1][1] < result.loss_history[0][1]
