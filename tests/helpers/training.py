"""What tests that train the tiny base model share: the spec they train with, and the held-out loss they score."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ftpipe.training.spec import TrainJobSpec


def tiny_spec(tiny_model, train_file: str | Path, output_dir: str | Path, settings: Mapping[str, Any] | None = None,
              /, *, eval_file: str | Path = "", **overrides: Any) -> TrainJobSpec:
    """A spec that trains ``tiny_model`` (the fixture's resolved base model) on ``train_file`` into ``output_dir``
    (and measures the validation loss on ``eval_file``, if given): the platform's defaults, then ``settings`` (a
    module's shared choice of hyperparameters), then ``overrides`` on top of both."""
    return TrainJobSpec(base_model_path=tiny_model.path, train_file=str(train_file), output_dir=str(output_dir),
                        eval_file=str(eval_file), **{**(settings or {}), **overrides})


def heldout_loss(model, tokenizer, conversations) -> float:
    """``model``'s mean loss on the assistant tokens of ``conversations``, one conversation at a time."""
    import torch

    from ftpipe.data.tokenize import tokenize_messages

    losses = []
    with torch.no_grad():
        for conv in conversations:
            ids, mask, _ = tokenize_messages(tokenizer, conv, 512)
            labels = torch.tensor([[i if m else -100 for i, m in zip(ids, mask)]])
            losses.append(model(input_ids=torch.tensor([ids]), labels=labels).loss.item())
    return sum(losses) / len(losses)
